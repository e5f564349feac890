"""The manager's Docker Engine API is a filter (docker/haproxy/docker-api.cfg): the calls the docker
launcher makes go through, anything else and any container that would reach the host is refused.
Probed from inside the manager container, where the filter's socket is."""

import json

import pytest

from tests.support.compose_stack import ComposeStack, docker

pytestmark = [pytest.mark.compose, pytest.mark.timeout(300)]

# Runs in the manager container: one line of JSON per probe, {name: status}.
PROBE = r"""
import http.client, json, socket, sys

class Engine(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect("/run/docker-api/docker.sock")

def status(method, path, body=None):
    engine = Engine("localhost")
    engine.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    response = engine.getresponse()
    response.read()
    return response.status

def create_service(container_spec, task_extra=None):
    spec = {"ContainerSpec": {"Image": "local/base:bookworm", **container_spec}, **(task_extra or {})}
    return status("POST", "/v1.41/services/create", json.dumps({"TaskTemplate": spec}).encode())

def create(name, host_config, raw=None):
    body = raw or json.dumps({"Image": "local/base:bookworm", "Cmd": ["true"], "HostConfig": host_config})
    return status("POST", f"/v1.41/containers/create?name={name}", body.encode())

print(json.dumps({
    "version": status("GET", "/version"),
    "list": status("GET", "/v1.41/containers/json"),
    "images": status("GET", "/v1.41/images/json"),
    "volumes": status("GET", "/v1.41/volumes"),
    "exec": status("POST", "/v1.41/containers/x/exec", b'{"Cmd": ["sh"]}'),
    "benign": create(sys.argv[1], {"ReadonlyRootfs": True}),
    "privileged": create("p1", {"Privileged": True}),
    "privileged_lowercase": create("p2", {"privileged": True}),
    "binds": create("p3", {"Binds": ["/:/host"]}),
    "bind_mount": create("p4", {"Mounts": [{"Type": "bind", "Source": "/", "Target": "/host"}]}),
    "volume_options": create("p5", {"Mounts": [{"Type": "volume", "Target": "/h",
        "VolumeOptions": {"DriverConfig": {"Options": {"type": "none", "o": "bind", "device": "/"}}}}]}),
    "pid_host": create("p6", {"PidMode": "host"}),
    "network_of_manager": create("p7", {"NetworkMode": "container:" + socket.gethostname()}),
    "cap_add": create("p8", {"CapAdd": ["SYS_ADMIN"]}),
    "seccomp_unconfined": create("p9", {"SecurityOpt": ["seccomp=unconfined"]}),
    "escaped_key": create("p10", {}, raw='{"Image": "x", "HostConfig": {"\\u0050rivileged": true}}'),
    # The swarm launcher's calls pass (this engine is no swarm manager: it answers 503 itself).
    "services": status("GET", "/v1.41/services"),
    "tasks": status("GET", "/v1.41/tasks"),
    "benign_service": create_service({"ReadOnly": True}),
    "service_update": status("POST", "/v1.41/services/x/update?version=1", b"{}"),
    "node_update": status("POST", "/v1.41/nodes/x/update?version=1", b"{}"),
    "service_cap_add": create_service({"CapabilityAdd": ["SYS_ADMIN"]}),
    "service_bind": create_service({"Mounts": [{"Type": "bind", "Source": "/", "Target": "/host"}]}),
    "service_seccomp": create_service({"Privileges": {"Seccomp": {"Mode": "unconfined"}}}),
    "service_host_network": create_service({}, {"Networks": [{"Target": "host"}]}),
}))
"""


def test_only_the_launchers_calls_pass_and_no_container_reaches_the_host(stack: ComposeStack) -> None:
    name = f"{stack.project}-probe"
    try:
        done = stack.compose("exec", "-T", "manager", "python", "-c", PROBE, name, timeout_s=60)
        statuses = json.loads(done.stdout)
    finally:
        docker("rm", "-f", name, check=False)
    assert (statuses.pop("version"), statuses.pop("list"), statuses.pop("benign")) == (200, 200, 201)
    swarm_calls = [statuses.pop(call) for call in ("services", "tasks", "benign_service")]
    assert 403 not in swarm_calls, swarm_calls
    assert statuses == dict.fromkeys(statuses, 403)
    assert len(statuses) == 19
