"""The settings every service shares. Each service subclasses :class:`CommonSettings`, builds it once
in ``__main__`` and passes it down; nothing below reads ``os.environ``.

Precedence: explicit values > ``SLUICE_*`` environment > TorchServe ``config.properties`` > defaults.
"""

from pathlib import Path
from typing import ClassVar, Literal

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sluice.config_properties import PropertiesSource


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SLUICE_", extra="ignore")

    # TorchServe config.properties key -> field name; subclasses extend it.
    TS_KEYS: ClassVar[dict[str, str]] = {}

    redis_url: str = "redis://127.0.0.1:6379/0"
    log_format: Literal["console", "json"] = "console"
    log_level: str = "info"
    ts_config: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, PropertiesSource(settings_cls))
