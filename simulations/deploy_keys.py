"""Keys and certificates for a Flower Deployment Engine with TLS and SuperNode authentication (docs/deployment.md).

    python simulations/deploy_keys.py --dir certs --nodes 2 --host 127.0.0.1

writes ``ca.crt`` (a self-signed CA; give it to every SuperNode and to `flwr`), ``server.key`` / ``server.crt`` (the
SuperLink's TLS key and its certificate for ``--host``, signed by the CA), and per SuperNode ``node-<i>`` (its
private key, OpenSSH format: `flower-supernode --auth-supernode-private-key`) and ``node-<i>.pub`` (its public key,
for `flwr supernode register`). ECDSA P-384 throughout, the curve Flower's own examples use; the private keys are
written with mode 0600. `cryptography` is a dependency of flwr, so nothing else is needed (no openssl, no ssh-keygen).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 30


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path


def _write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def write_tls(directory: Path, *, host: str = "127.0.0.1") -> TlsFiles:
    """A CA and a server certificate it signed, valid for ``host`` (an IP address or a DNS name) and localhost."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_cert = (x509.CertificateBuilder().subject_name(_name("fl-privtext test CA")).issuer_name(_name("fl-privtext test CA"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA384()))
    try:
        host_name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        host_name = x509.DNSName(host)
    names = [host_name] + [n for n in (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
                           if n != host_name]
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (x509.CertificateBuilder().subject_name(_name(host)).issuer_name(ca_cert.subject)
                   .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
                   .add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .sign(ca_key, hashes.SHA384()))
    files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(files.server_key, server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return files


def write_node_keys(directory: Path, name: str) -> tuple[Path, Path]:
    """A SuperNode's authentication key pair: (private key in OpenSSH format, public key ``<name>.pub``)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private = _write_private(directory / name, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    public = directory / f"{name}.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH) + f" {name}\n".encode())
    return private, public


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="certs", help="output folder")
    ap.add_argument("--nodes", type=int, default=2, help="SuperNode key pairs to write (node-0, node-1, ...)")
    ap.add_argument("--host", default="127.0.0.1", help="the SuperLink's address as the SuperNodes dial it")
    args = ap.parse_args()
    if args.nodes < 0:
        raise ValueError(f"--nodes must be >= 0; got {args.nodes}.")
    out = Path(args.dir)
    tls = write_tls(out, host=args.host)
    keys = [write_node_keys(out, f"node-{i}") for i in range(args.nodes)]
    print(f"CA {tls.ca_cert}, SuperLink {tls.server_cert} + {tls.server_key}, "
          f"SuperNode keys {', '.join(str(k) for k, _ in keys) or '(none)'} (+ .pub)")


if __name__ == "__main__":
    main()
