"""How to talk to the local apiserver: address, bearer token, CA; kubeconfig files."""

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
    token: str
    ca_file: Path

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

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
            "users": [{"name": user, "user": {"token": self.token}}],
            "contexts": [
                {"name": context, "context": {"cluster": context, "user": user}}
            ],
            "current-context": context,
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
