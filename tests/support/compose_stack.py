"""docker-compose.yml as the container tests run it: a project of its own, free 127.0.0.1 ports, a model
store in a temporary folder, the model API on, a model cache volume of its own. Brought up with the
images scripts/compose_images.sh built (never builds), taken down by scripts/compose_down.sh (what
`make compose-down` runs) with the volumes. The Docker engine is reached through the docker CLI."""

import contextlib
import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
IMAGES = (
    "local/sluice-gateway:dev",
    "local/sluice-manager:dev",
    "local/sluice-worker:dev",
    "local/sluice-haproxy:dev",
)
KEY_FILE = "/var/lib/sluice/key_file.json"
CLUSTER_KEY = "sluice:manager:cluster-id"
LABEL_CLUSTER = "io.sluice.cluster"
UP_TIMEOUT_S = 300
DOWN_TIMEOUT_S = 300
CALL_TIMEOUT_S = 60


def docker(*args: str, timeout_s: float = 60, check: bool = True) -> str:
    """stdout of ``docker ARGS`` (raises with stderr when it fails and ``check``)."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def engine_time() -> str:
    """The Docker engine's clock, for ``docker events --since/--until``."""
    return docker("info", "--format", "{{.SystemTime}}").strip()


def exit_codes(model: str, since: str, until: str) -> dict[str, int]:
    """Worker id -> exit code of the model's containers that died between two engine timestamps."""
    events = docker("events", "--since", since, "--until", until, "--format", "{{json .}}",
                    "--filter", "event=die", "--filter", f"label=io.sluice.model={model}")  # fmt: skip
    attributes = [json.loads(line)["Actor"]["Attributes"] for line in events.splitlines()]
    return {a["io.sluice.worker"]: int(a["exitCode"]) for a in attributes}


def compose_program() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


def unavailable_reason() -> str | None:
    """Why the stack cannot run here, or None."""
    if shutil.which("docker") is None:
        return "docker engine unavailable: no docker client"
    try:
        docker("info", "--format", "{{.ServerVersion}}", timeout_s=20)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"docker engine unavailable: {exc}"
    missing = [image for image in IMAGES if not docker("images", "-q", image).strip()]
    if missing:
        return f"images not built (scripts/compose_images.sh): {', '.join(missing)}"
    return None


@dataclass(frozen=True)
class WorkerContainer:
    id: str
    name: str
    state: str
    labels: Mapping[str, str]

    @property
    def worker_id(self) -> str:
        return self.labels.get("io.sluice.worker", "")


@dataclass
class ComposeStack:
    project: str
    store: Path
    grpc_port: int
    rest_port: int
    metrics_port: int
    management_port: int
    management_rest_port: int
    settings: dict[str, str] = field(default_factory=dict)
    # Override files besides docker-compose.yml (docker-compose.ha.yml), as COMPOSE_FILES has them.
    files: tuple[str, ...] = ()
    # The certificate the published ports serve (docker-compose.tls.yml): clients trust it.
    ca: Path | None = None
    _keys: dict[str, str] = field(default_factory=dict)
    _cluster: str = ""

    @classmethod
    def create(
        cls, root: Path, files: tuple[str, ...] = (), ca: Path | None = None, **settings: str
    ) -> "ComposeStack":
        """A stack whose model store is ``root/store``, with override ``files``; ``settings`` are extra
        environment variables (the stack's own variables and the SLUICE_* settings it passes through);
        ``ca``: the certificate its published ports serve TLS with."""
        store = root / "store"
        store.mkdir(parents=True, exist_ok=True)
        store.chmod(0o755)  # the manager reads it as its own user
        project = f"sluicet{secrets.token_hex(3)}"
        grpc, rest, metrics, management, management_rest = (free_port() for _ in range(5))
        return cls(
            project, store, grpc, rest, metrics, management, management_rest, dict(settings), files, ca
        )

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def channel(self) -> grpc.Channel:
        """A channel to the published gRPC port (over TLS when the stack serves it)."""
        if self.ca is None:
            return grpc.insecure_channel(self.grpc_target)
        return grpc.secure_channel(self.grpc_target, grpc.ssl_channel_credentials(self.ca.read_bytes()))

    @property
    def cache_volume(self) -> str:
        return f"{self.project}-model-cache"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        base = os.environ.get("BASE_IMAGE", "local/base:bookworm")
        redis_default = base if base == "local/base:bookworm" else "redis:7"
        env.update(
            COMPOSE_PROJECT_NAME=self.project,
            BASE_IMAGE=base,
            REDIS_IMAGE=os.environ.get("REDIS_IMAGE", redis_default),
            MODEL_STORE=str(self.store),
            SLUICE_MODEL_CACHE_VOLUME=self.cache_volume,
            GATEWAY_PORT=str(self.grpc_port),
            GATEWAY_REST_PORT=str(self.rest_port),
            GATEWAY_METRICS_PORT=str(self.metrics_port),
            MANAGER_PORT=str(self.management_port),
            MANAGER_REST_PORT=str(self.management_rest_port),
            SLUICE_ENABLE_MODEL_API="true",
            COMPOSE_FILES=" ".join(self.files),
        )
        env.update(self.settings)
        return env

    # compose -------------------------------------------------------------------------------------
    def compose(
        self, *args: str, timeout_s: float = UP_TIMEOUT_S, check: bool = True
    ) -> "subprocess.CompletedProcess[str]":
        done = subprocess.run(
            [
                *compose_program(),
                *(arg for name in ("docker-compose.yml", *self.files) for arg in ("-f", str(ROOT / name))),
                *args,
            ],
            cwd=ROOT,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"compose {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def up(self, gateways: int = 1) -> None:
        self.compose("up", "-d", "--no-build", "--scale", f"gateway={gateways}")

    def scale_gateways(self, gateways: int) -> None:
        self.compose("up", "-d", "--no-build", "--no-deps", "--no-recreate", "--scale", f"gateway={gateways}",
                     "gateway")  # fmt: skip

    def down(self) -> "subprocess.CompletedProcess[str]":
        """scripts/compose_down.sh with the volumes: what `make compose-down REMOVE_VOLUMES=1` runs."""
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "compose_down.sh")],
            cwd=ROOT,
            env={**self.environment(), "REMOVE_VOLUMES": "1"},
            capture_output=True,
            text=True,
            timeout=DOWN_TIMEOUT_S,
            check=False,
        )

    def logs(self, tail: int = 80) -> str:
        return self.compose("logs", "--no-color", f"--tail={tail}", check=False, timeout_s=60).stdout

    def log_events(self, service: str, event: str) -> list[dict[str, Any]]:
        """The JSON log lines (SLUICE_LOG_FORMAT=json) of a service whose event is ``event``, oldest first."""
        found = []
        for line in self.compose(
            "logs", "--no-color", service, check=False, timeout_s=60
        ).stdout.splitlines():
            _, _, text = line.partition("| ")
            try:
                entry = json.loads(text)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == event:
                found.append(entry)
        return found

    def container(self, service: str, index: int = 1) -> str:
        """The id of a service's container (compose's ``--index``)."""
        found = self.containers(service)
        if len(found) < index:
            raise LookupError(f"{service} has no container {index}")
        return found[index - 1]

    def containers(self, service: str) -> list[str]:
        """Ids of a service's containers, by compose's container number."""
        ids = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}",
                     "--filter", f"label=com.docker.compose.service={service}").split()  # fmt: skip
        number = '{{index .Config.Labels "com.docker.compose.container-number"}}'
        return sorted(ids, key=lambda cid: int(docker("inspect", "-f", number, cid).strip() or 0))

    def health(self, container: str) -> str:
        """A container's health (its image's HEALTHCHECK), or its state when it has none."""
        format_ = "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}"
        return docker("inspect", "-f", format_, container).strip()

    # Engine state --------------------------------------------------------------------------------
    def cluster_id(self) -> str:
        """The id labelling this stack's worker containers (kept in its Redis by the first manager)."""
        if not self._cluster:
            done = self.compose("exec", "-T", "redis", "redis-cli", "--raw", "GET", CLUSTER_KEY, timeout_s=30)
            self._cluster = done.stdout.strip()
            if not self._cluster:
                raise LookupError("no cluster id in Redis yet")
        return self._cluster

    def workers(self, model: str | None = None, *, running_only: bool = True) -> list[WorkerContainer]:
        """The worker containers of this stack's cluster (of one model)."""
        filters = ["--filter", f"label={LABEL_CLUSTER}={self.cluster_id()}"]
        if model is not None:
            filters += ["--filter", f"label=io.sluice.model={model}"]
        args = ["ps", "--no-trunc", "--format", "{{json .}}", *filters]
        if not running_only:
            args.insert(1, "-a")
        found = []
        for line in docker(*args).splitlines():
            row = json.loads(line)
            labels = dict(item.split("=", 1) for item in row["Labels"].split(",") if "=" in item)
            found.append(WorkerContainer(row["ID"], row["Names"], row["State"], labels))
        return found

    def wait_for_workers(self, model: str, count: int, timeout_s: float = 120) -> list[WorkerContainer]:
        """Wait until exactly ``count`` containers of ``model`` run."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.workers(model)
            if len(found) == count:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{model}: {len(found)} worker containers, not {count}, after {timeout_s} s"
                )
            time.sleep(0.5)

    def leftovers(self) -> list[str]:
        """What is left of this stack in the engine: containers, networks, volumes."""
        project = f"label=com.docker.compose.project={self.project}"
        left = [f"container {c}" for c in docker("ps", "-aq", "--filter", project).split()]
        left += [f"network {n}" for n in docker("network", "ls", "-q", "--filter", project).split()]
        left += [f"volume {v}" for v in docker("volume", "ls", "-q", "--filter", project).split()]
        return left

    # Keys and APIs -------------------------------------------------------------------------------
    def key(self, kind: str) -> str:
        """The ``inference`` or ``management`` key from the manager's key file."""
        if not self._keys:
            code = f"import json; print(json.dumps(json.load(open({KEY_FILE!r}))))"
            deadline = time.monotonic() + 90
            while True:
                done = self.compose("exec", "-T", "manager", "python", "-c", code, check=False, timeout_s=30)
                if done.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no key file in the manager container: {done.stderr}")
                time.sleep(1)
            self._keys = {name: entry["key"] for name, entry in json.loads(done.stdout).items()}
        return self._keys[kind]

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.key('inference')}"),)

    def management(self, method: str, path: str, timeout_s: float = 300) -> tuple[int, Any]:
        """A management REST call; (status, decoded JSON body)."""
        scheme = "http" if self.ca is None else "https"
        request = urllib.request.Request(
            f"{scheme}://127.0.0.1:{self.management_rest_port}{path}",
            method=method,
            headers={"Authorization": f"Bearer {self.key('management')}"},
        )
        context = None if self.ca is None else ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def management_answers(self) -> bool:
        """Whether the management API answers (ListModels)."""
        try:
            return self.management("GET", "/models", timeout_s=5)[0] == 200
        except OSError:  # refused or reset while the manager restarts
            return False

    def metrics(self, slot: int) -> tuple[int, str]:
        """(status, text) of the gateway in the load balancer's ``slot``."""
        url = f"http://127.0.0.1:{self.metrics_port}/gateways/{slot}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def lb_servers_up(self, backend: str) -> int:
        """How many servers of a load balancer backend are UP (HAProxy's status page, as CSV)."""
        url = f"http://127.0.0.1:{self.metrics_port}/lb;csv"
        with urllib.request.urlopen(url, timeout=10) as response:
            rows = [line.split(",") for line in response.read().decode().splitlines()]
        return sum(1 for row in rows if row[0] == backend and row[1] != "BACKEND" and row[17] == "UP")


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.2) -> float:
    """Seconds until ``condition()`` held (polled); TimeoutError naming ``what`` after ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)
    return time.monotonic() - started


def wait_for_gateways(stack: ComposeStack, count: int, timeout_s: float = 120) -> None:
    """Until ``count`` gateway containers are healthy (serving) and the load balancer has them up for
    gRPC and for metrics. Health first: a new replica may take the IP of one that is gone, and the load
    balancer's slot for it reads UP before its first check fails (calls meanwhile go to the others)."""
    wait_for(
        lambda: [stack.health(c) for c in stack.containers("gateway")] == ["healthy"] * count,
        timeout_s,
        f"{count} healthy gateways",
        interval_s=0.5,
    )
    wait_for(
        lambda: (
            (stack.lb_servers_up("gateways_grpc"), stack.lb_servers_up("gateways_metrics")) == (count, count)
        ),
        timeout_s,
        f"the load balancer sees {count} gateways",
        interval_s=0.5,
    )


def requests_by_gateway(slots: Sequence[int], stack: ComposeStack, model: str) -> dict[str, float]:
    """ts_inference_requests_total of ``model`` per gateway hostname, over the given metrics slots."""
    counts: dict[str, float] = {}
    for slot in slots:
        status, text = stack.metrics(slot)
        if status != 200:
            continue
        for line in text.splitlines():
            if line.startswith("ts_inference_requests_total{") and f'model_name="{model}"' in line:
                host = line.split('hostname="', 1)[1].split('"', 1)[0]
                counts[host] = counts.get(host, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def answers(stack: ComposeStack, model: str = "demo", timeout_s: float = CALL_TIMEOUT_S) -> bool:
    """Whether ``model`` (the demo model's input) answers one call through the published gRPC port."""
    request = pb.PredictionsRequest(model_name=model, input={"data": b"[5.1, 3.5, 1.4, 0.2]"})
    with stack.channel() as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        try:
            stub.Predictions(request, metadata=stack.metadata(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return True


def wait_until_serving(stack: ComposeStack, model: str = "demo", timeout_s: float = 240) -> None:
    """Until ``model`` answers through the published gRPC port (right after `up` it may not be
    registered yet, or its worker container may still be loading)."""
    wait_for(lambda: answers(stack, model, timeout_s=10), timeout_s, f"{model} served", interval_s=1)


@contextlib.contextmanager
def running(stack: ComposeStack) -> Iterator[ComposeStack]:
    """``stack`` up and serving its demo model; its logs printed if bringing it up fails; taken
    down (with its volumes) afterwards."""
    try:
        stack.up()
        wait_until_serving(stack)
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        done = stack.down()
        assert done.returncode == 0, done.stdout + done.stderr
