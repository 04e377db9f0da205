"""The topology file: both datacenters of one PDD deployment in one YAML document.

::

    model_path: /models/Qwen3-32B
    image: lmsysorg/sglang:v0.5.23-pdd        # for `sglang-pdd render k8s`
    wan: {bandwidth_mbps: 10000, rtt_ms: 40}  # the link between the two sites
    router:
      site: A
      port: 8000
      options: {handoff-mode: one-shot}       # any `sglang-pdd router` flag, without `--`
      keys: {api_key_env: PDD_API_KEY}        # secrets come from the environment, never the file
    sites:
      A:
        ib_device: mlx5_0                     # RDMA within the site (Mooncake)
        instances:
          - {name: prefill-0, role: prefill, host: 10.0.0.1, port: 30000, tp: 8,
             ledger_port: 5700}                 # the routers' shared transfer ledger
          - {name: relay-0, role: relay, host: 10.0.0.2, port: 30000, tp: 1}
      B:
        instances:
          - {name: main-0, role: main, host: 10.1.0.1, port: 30000, tp: 8,
             control_port: 5600, kv_events_port: 5557, control_curve_secret: /keys/md.key_secret,
             control_curve_clients: /keys/routers}

Decoding is typed (msgspec, unknown keys refused); every error is a ``ValueError`` naming the
key's path (``sites.B.instances[0].control_port``) and what it accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from sglang_pdd.config import is_loopback

ROLES = ("prefill", "relay", "main")


class _Spec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Unknown keys are refused: a misspelt key must not be silently ignored."""


class Instance(_Spec):
    """One SGLang server. ``host``/``port``: where it listens (and is reached, unless ``url``
    says how the router reaches it, e.g. through a proxy)."""

    name: str
    role: Literal["prefill", "relay", "main"]
    host: str
    port: int
    tp: int = 1
    chips: list[int] = []  # accelerator indices (CUDA_VISIBLE_DEVICES); empty: all visible
    url: str | None = None  # how the router reaches its HTTP port (default http://host:port)
    bootstrap_port: int | None = None  # prefill: --disaggregation-bootstrap-port
    ledger_port: int | None = None  # prefill: --pdd-ledger-port (one per deployment)
    control_port: int | None = None  # main: --pdd-control-port
    control_url: str | None = None  # main: how the router reaches it (default tcp://host:port)
    kv_events_port: int | None = None  # main: its KV-event publisher
    kv_events_url: str | None = None  # main: how the router reaches it
    control_curve_secret: str = ""  # main: --pdd-control-curve-secret
    control_curve_clients: str = ""  # main: --pdd-control-curve-clients
    control_insecure: bool = False  # main: --pdd-control-insecure
    kv_events_insecure: bool = False  # --pdd-kv-events-insecure
    args: list[str] = []  # more launch_server flags, as given

    @property
    def http_url(self) -> str:
        return self.url or f"http://{self.host}:{self.port}"

    @property
    def control_endpoint(self) -> str | None:
        if self.control_port is None:
            return None
        return self.control_url or f"tcp://{self.host}:{self.control_port}"

    @property
    def ledger_endpoint(self) -> str | None:
        if self.ledger_port is None:
            return None
        return f"tcp://{self.host}:{self.ledger_port}"

    @property
    def kv_events_endpoint(self) -> str | None:
        if self.kv_events_port is None:
            return None
        return self.kv_events_url or f"tcp://{self.host}:{self.kv_events_port}"


class Site(_Spec):
    """One datacenter: its instances and how KV moves inside it."""

    instances: list[Instance]
    ib_device: str | None = None  # RDMA device for Mooncake within the site (None: TCP)


class Wan(_Spec):
    """The link between the two sites, as the router's policy assumes it."""

    bandwidth_mbps: float
    rtt_ms: float


class Keys(_Spec):
    """Names of environment variables holding the router's keys (never the keys)."""

    api_key_env: str | None = None
    admin_api_key_env: str | None = None
    instance_api_key_env: str | None = None


class RouterSpec(_Spec):
    """The router: its site (where P and RLD are), listen address and flags."""

    site: str
    host: str = "0.0.0.0"
    port: int = 8000
    options: dict[str, Any] = {}  # router flag (without "--") -> value; true: a bare flag
    keys: Keys = Keys()
    replicas: int = 1  # for `render k8s`


class Topology(_Spec):
    """A whole PDD deployment."""

    model_path: str
    sites: dict[str, Site]
    wan: Wan
    router: RouterSpec
    image: str = "lmsysorg/sglang:v0.5.23"

    def instances(self, role: str | None = None) -> list[tuple[str, Instance]]:
        """(site name, instance) pairs, in file order, of ``role`` (None: every role)."""
        return [
            (name, inst)
            for name, site in self.sites.items()
            for inst in site.instances
            if role is None or inst.role == role
        ]

    def remote_hosts(self, site: str) -> list[str]:
        """Hosts of the decoding instances in other sites (P's --pdd-wan-hosts)."""
        return sorted(
            {i.host for s, i in self.instances() if s != site and i.role in ("relay", "main")}
        )


def load_topology(path: str | Path) -> Topology:
    """Read and check a topology file; ``ValueError`` naming the file and key on any error."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the topology file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from exc
    try:
        return parse_topology(raw)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def parse_topology(raw: object) -> Topology:
    """A decoded YAML document as a checked ``Topology`` (``ValueError`` naming the key)."""
    # Sites one at a time first: msgspec names a mapping's keys "[...]", the site's name is
    # what the reader needs.
    sites = raw.get("sites") if isinstance(raw, dict) else None
    for name, site in sites.items() if isinstance(sites, dict) else ():
        _convert(site, Site, f"sites.{name}")
    topology = _convert(raw, Topology, "")
    check_topology(topology)
    return topology


def _convert(raw: object, kind: type, where: str):
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        # msgspec says "... - at `$.instances[0].port`": lead with the key's path.
        message, _, at = str(exc).partition(" - at `$")
        key = (where + at.rstrip("`")).lstrip(".") or "(top level)"
        raise ValueError(f"{key}: {message}") from exc


def check_topology(t: Topology) -> None:
    """What the types cannot say: roles per site, ports, pairs of fields, unique names."""
    problems: list[str] = []
    if len(t.sites) != 2:
        problems.append(f"sites: PDD spans two sites, got {len(t.sites)} ({', '.join(t.sites)})")
    if t.router.site not in t.sites:
        problems.append(f"router.site: {t.router.site!r} is not one of {', '.join(t.sites)}")
    seen_names: set[str] = set()
    seen_ports: set[tuple[str, int]] = set()
    for site_name, site in t.sites.items():
        for i, inst in enumerate(site.instances):
            key = f"sites.{site_name}.instances[{i}]"
            problems += _check_instance(key, inst, site_name == t.router.site)
            if inst.name in seen_names:
                problems.append(f"{key}.name: {inst.name!r} is used twice")
            seen_names.add(inst.name)
            for field, port in _ports(inst):
                if (inst.host, port) in seen_ports:
                    problems.append(f"{key}.{field}: {inst.host}:{port} is used twice")
                seen_ports.add((inst.host, port))
    if t.router.site in t.sites:
        here = {i.role for i in t.sites[t.router.site].instances}
        if "prefill" not in here:
            problems.append(f"sites.{t.router.site}: the router's site needs a prefill instance")
        if not any(i.role == "main" for s, i in t.instances() if s != t.router.site):
            problems.append("sites: the other site needs a main instance")
    ledgers = [i.name for _, i in t.instances("prefill") if i.ledger_port is not None]
    if len(ledgers) > 1:
        problems.append(
            f"sites: ledger_port on {', '.join(ledgers)}: the routers share one transfer ledger"
        )
    mains = [i for _, i in t.instances("main")]
    with_events = [i.kv_events_port is not None for i in mains]
    if any(with_events) and not all(with_events):
        problems.append("sites: give kv_events_port to every main instance or to none")
    if not t.wan.bandwidth_mbps > 0 or not t.wan.rtt_ms >= 0:
        problems.append("wan: bandwidth_mbps must be > 0 and rtt_ms >= 0")
    if t.router.replicas < 1:
        problems.append(f"router.replicas: must be >= 1, got {t.router.replicas}")
    if not 0 < t.router.port < 65536:
        problems.append(f"router.port: must be in 1..65535, got {t.router.port}")
    if problems:
        raise ValueError("; ".join(problems))


def _ports(inst: Instance) -> list[tuple[str, int]]:
    ports = [("port", inst.port)]
    for field in ("bootstrap_port", "ledger_port", "control_port", "kv_events_port"):
        if (value := getattr(inst, field)) is not None:
            ports.append((field, value))
    return ports


def _check_instance(key: str, inst: Instance, in_router_site: bool) -> list[str]:
    problems = []
    for field, port in _ports(inst):
        if not 0 < port < 65536:
            problems.append(f"{key}.{field}: must be in 1..65535, got {port}")
    if inst.tp < 1:
        problems.append(f"{key}.tp: must be >= 1, got {inst.tp}")
    if inst.chips and len(inst.chips) != inst.tp:
        problems.append(f"{key}.chips: {len(inst.chips)} chips for tp {inst.tp}")
    main_only = ("control_port", "control_url", "kv_events_port", "kv_events_url")
    main_only += ("control_curve_secret", "control_curve_clients", "control_insecure")
    if inst.role == "main":
        if inst.control_port is None:
            problems.append(f"{key}.control_port: a main instance needs one")
        if bool(inst.control_curve_secret) != bool(inst.control_curve_clients):
            problems.append(f"{key}: control_curve_secret and control_curve_clients go together")
        if in_router_site:
            problems.append(f"{key}.role: main belongs in the other site than the router")
        if not (is_loopback(inst.host) or inst.control_curve_secret or inst.control_insecure):
            problems.append(
                f"{key}: its control socket binds {inst.host}, not loopback: give it "
                "control_curve_secret and control_curve_clients, or control_insecure: true"
            )
    else:
        for field in main_only:
            if getattr(inst, field):
                problems.append(f"{key}.{field}: only a main instance takes it")
    if inst.kv_events_port is not None and not (is_loopback(inst.host) or inst.kv_events_insecure):
        problems.append(
            f"{key}.kv_events_port: the KV-event publisher would bind {inst.host}, not "
            "loopback, in the clear: kv_events_insecure: true (and a private link), or no "
            "kv_events_port"
        )
    for field in ("bootstrap_port", "ledger_port"):
        if inst.role != "prefill" and getattr(inst, field) is not None:
            problems.append(f"{key}.{field}: only a prefill instance takes it")
    if inst.role in ("prefill", "relay") and not in_router_site:
        problems.append(f"{key}.role: {inst.role} belongs in the router's site")
    for field in ("url",):
        if (v := getattr(inst, field)) and not v.startswith(("http://", "https://")):
            problems.append(f"{key}.{field}: an http(s):// URL, got {v!r}")
    for field in ("control_url", "kv_events_url"):
        if (v := getattr(inst, field)) and not v.startswith("tcp://"):
            problems.append(f"{key}.{field}: a tcp://HOST:PORT address, got {v!r}")
    return problems
