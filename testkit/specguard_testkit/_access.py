"""How to talk to the local apiserver: address, credentials (a bearer token or a client
certificate), CA; kubeconfig files."""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml


@dataclass(frozen=True)
class ClusterAccess:
    server: str  # https://127.0.0.1:PORT
    token: str  # "" when a client certificate authenticates
    ca_file: Path
    client_cert: tuple[Path, Path] | None = None  # (certificate, key)

    def _ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert[0]), str(self.client_cert[1]))
        return context

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, timeout: float = 10.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.server, headers=self._headers(), verify=self._ssl(), timeout=timeout
        )

    def async_client(self, timeout: float = 10.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.server, headers=self._headers(), verify=self._ssl(), timeout=timeout
        )

    def with_token(self, token: str) -> ClusterAccess:
        return ClusterAccess(self.server, token, self.ca_file)

    def with_client_cert(self, cert: Path, key: Path) -> ClusterAccess:
        return ClusterAccess(self.server, "", self.ca_file, (cert, key))

    def kubeconfig(self, user: str = "admin", context: str = "specguard-local") -> dict[str, Any]:
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": user, "user": self._kubeconfig_user()}],
            "contexts": [
                {"name": context, "context": {"cluster": context, "user": user}}
            ],
            "current-context": context,
        }

    def _kubeconfig_user(self) -> dict[str, str]:
        if self.client_cert is None:
            return {"token": self.token}
        return {
            "client-certificate": str(self.client_cert[0]),
            "client-key": str(self.client_cert[1]),
        }

    def write_kubeconfig(self, path: Path, user: str = "admin") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(user=user), sort_keys=False))
        path.chmod(0o600)
        return path


def raise_for_status(response: httpx.Response) -> httpx.Response:
    """Like ``response.raise_for_status`` but carrying the apiserver's message."""
    if response.is_error:
        raise httpx.HTTPStatusError(
            f"{response.request.method} {response.request.url.path}: "
            f"{response.status_code} {response.text[:500]}",
            request=response.request,
            response=response,
        )
    return response
