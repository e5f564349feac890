"""Settings every service shares (CommonSettings) and TorchServe config.properties support."""
