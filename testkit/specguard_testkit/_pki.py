"""Keys and certificates for one local cluster, made with the openssl command line.

ECDSA P-256 keys: generating them is instant, where RSA takes a noticeable share of a
cluster start on two busy cores. kube-apiserver accepts ES256 service-account keys.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class ClusterPki:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    sa_key: Path  # signs service-account tokens (controller-manager, apiserver)
    sa_pub: Path  # verifies them (apiserver)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def make_pki(directory: Path, *, service_ip: str, addresses: Sequence[str] = ()) -> ClusterPki:
    """A CA, a serving certificate for 127.0.0.1 / ``service_ip`` / ``addresses`` /
    kubernetes.default, and the service-account key pair."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl not found: install Debian's openssl package")
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
        "-subj", "/CN=specguard-local-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr",
        "-subj", "/CN=kube-apiserver", cwd=directory,
    )  # fmt: skip
    ips = ["127.0.0.1", service_ip, *addresses]
    _sign(directory, "apiserver", ips=ips, names=SERVER_NAMES, usage="serverAuth")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=directory)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    return ClusterPki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "apiserver.crt",
        server_key=directory / "apiserver.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )


def make_client_cert(
    pki: ClusterPki, directory: Path, *, user: str, group: str
) -> tuple[Path, Path]:
    """A client certificate signed by the cluster CA for ``user`` in ``group`` (the apiserver
    takes CN as the user name and O as a group, e.g. ``system:node:gpu-node-0`` in
    ``system:nodes``). Returns (certificate, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = user.replace(":", "_")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", *ec, "-keyout", f"{stem}.key", "-out", f"{stem}.csr",
        "-subj", f"/O={group}/CN={user}", cwd=directory,
    )  # fmt: skip
    _sign(directory, stem, usage="clientAuth", ca=pki)
    return directory / f"{stem}.crt", directory / f"{stem}.key"


def make_serving_cert(
    pki: ClusterPki, directory: Path, *, name: str, ips: Sequence[str]
) -> tuple[Path, Path]:
    """A serving certificate signed by the cluster CA for ``name`` at ``ips`` (a kubelet's:
    the apiserver verifies it with ``--kubelet-certificate-authority``)."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    _sign(directory, name, ips=ips, names=(name,), usage="serverAuth", ca=pki)
    return directory / f"{name}.crt", directory / f"{name}.key"


def _sign(
    directory: Path, stem: str, *, usage: str, ips: Sequence[str] = (),
    names: Sequence[str] = (), ca: ClusterPki | None = None,
) -> None:  # fmt: skip
    """Sign ``stem``.csr with the CA (``ca``, or ca.crt/ca.key in ``directory``)."""
    sans = ",".join([*(f"IP:{ip}" for ip in ips), *(f"DNS:{n}" for n in names)])
    (directory / f"{stem}.ext").write_text(
        (f"subjectAltName={sans}\n" if sans else "")
        + "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage={usage}\n"
    )
    ca_cert, ca_key = (str(ca.ca_cert), str(ca.ca_key)) if ca else ("ca.crt", "ca.key")
    _openssl(
        "x509", "-req", "-in", f"{stem}.csr", "-CA", ca_cert, "-CAkey", ca_key,
        "-CAcreateserial", "-out", f"{stem}.crt", "-days", "3650",
        "-extfile", f"{stem}.ext", cwd=directory,
    )  # fmt: skip
