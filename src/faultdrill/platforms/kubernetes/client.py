"""The Kubernetes API from the harness, which lives outside the cluster's namespaces.

The test cluster's apiserver listens on the control-plane host's address inside its own
network namespace; the host's network is never touched (no veth to the host, no port
forward). The harness reaches it with sockets *created* in that namespace: a socket's
network namespace is fixed when it is created, so a connection made by a short-lived
thread that entered the namespace (``netns.run_in_netns``) is then used from any thread.
:func:`api_client` installs that as the connection class of the official client's pool
(``kubernetes==20.13.0``, ``urllib3<2``); for a cluster given by a kubeconfig alone,
pass ``netns=None`` and it is the plain client.

``kubernetes`` is an optional dependency (``pip install 'faultdrill[kubernetes]'``);
importing this module does not need it, calling :func:`api_client` does.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

from faultdrill.errors import EnvironmentPrepError
from faultdrill.host.linux import run_in_netns

__all__ = ["api_client", "client_missing", "get_in_netns", "kube"]


def client_missing() -> str | None:
    """Why the Python client cannot be used here (None: it can)."""
    try:
        import kubernetes  # noqa: F401
        import urllib3
    except ImportError:
        return "the kubernetes client is not installed: pip install 'faultdrill[kubernetes]'"
    if not urllib3.__version__.startswith("1."):
        return f"urllib3 {urllib3.__version__}: the kubernetes 20.13 client needs urllib3<2"
    return None


def kube() -> Any:
    """The ``kubernetes`` module, or EnvironmentPrepError naming the fix."""
    why = client_missing()
    if why:
        raise EnvironmentPrepError(why)
    import kubernetes

    return kubernetes


def _ns_pool_classes(netns: str) -> dict[str, Any]:
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def new_conn(base: Any) -> Any:
        def _new_conn(self: Any) -> Any:
            return run_in_netns(netns, lambda: base._new_conn(self))

        return _new_conn

    https_conn = type(
        "NsHTTPSConnection", (HTTPSConnection,), {"_new_conn": new_conn(HTTPSConnection)}
    )
    http_conn = type("NsHTTPConnection", (HTTPConnection,), {"_new_conn": new_conn(HTTPConnection)})
    return {
        "https": type(
            "NsHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn}
        ),
        "http": type("NsHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn}),
    }


def api_client(kubeconfig: Path, netns: str | None = None, *, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for ``kubeconfig`` (its ``context``, default the
    current one); its connections are made in network namespace ``netns`` when given.
    Raises EnvironmentPrepError."""
    k8s = kube()
    cfg = k8s.client.Configuration()
    try:
        k8s.config.load_kube_config(
            config_file=str(kubeconfig), context=context, client_configuration=cfg
        )
    except (OSError, k8s.config.ConfigException) as exc:
        raise EnvironmentPrepError(f"{kubeconfig}: cannot load kubeconfig: {exc}") from exc
    cfg.retries = False  # a paused apiserver must show as an error, not as a slow call
    api = k8s.client.ApiClient(cfg)
    if netns is not None:
        api.rest_client.pool_manager.pool_classes_by_scheme = _ns_pool_classes(netns)
    return api


def get_in_netns(
    netns: str, url: str, *, ca: Path | None, token: str = "", timeout: float = 3.0
) -> tuple[int, str]:
    """GET ``url`` from namespace ``netns``: (HTTP status, body); status 0 when it did not
    answer (refused, timed out, TLS not up yet). ``ca=None``: the server's certificate is
    not verified (the controller manager's and scheduler's are self-signed)."""
    if ca is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, headers=headers)

    def get() -> tuple[int, str]:
        try:
            resp: HTTPResponse = urllib.request.urlopen(req, timeout=timeout, context=ctx)
            with resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (OSError, ValueError):
            return 0, ""

    try:
        return run_in_netns(netns, get)
    except OSError:
        return 0, ""
