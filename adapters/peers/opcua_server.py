#!/usr/bin/env python3
"""A real OPC UA server on loopback for Grid's tests and journeys.

asyncua serves the protocol (secure channel, sessions, subscriptions, the address
space); this script adds only what a test drives through the peers' control protocol
(adapters/peers/README.md): one JSON request per line on stdin, one JSON answer per line
on stdout. A status a test sets is a real OPC UA StatusCode in the DataValue the server
publishes.
"""

import argparse
import asyncio
import datetime
import ipaddress
import json
import logging
import math
import sys
from pathlib import Path

from asyncua import Server, ua
from asyncua.crypto.validator import ServiceError
from asyncua.server.internal_session import InternalSession
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NAMESPACE = "urn:grid:peer:opcua"
APPLICATION_URI = "urn:grid:peer:opcua-server"

# ns=2;s=NAME → (variant type, initial value). `Batch.Name` is the non-numeric node.
NODES = {
    "Boiler.Pressure": (ua.VariantType.Double, 0.0),
    "Line.Count": (ua.VariantType.Int32, 0),
    "Pump.Running": (ua.VariantType.Boolean, False),
    "Batch.Name": (ua.VariantType.String, "batch-0"),
    "Boiler.Status": (ua.VariantType.Double, 0.0),
}

POLICIES = {
    "Basic256Sha256": (
        ua.SecurityPolicyType.Basic256Sha256_Sign,
        ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
    ),
    "Aes128Sha256RsaOaep": (
        ua.SecurityPolicyType.Aes128Sha256RsaOaep_Sign,
        ua.SecurityPolicyType.Aes128Sha256RsaOaep_SignAndEncrypt,
    ),
    "Aes256Sha256RsaPss": (
        ua.SecurityPolicyType.Aes256Sha256RsaPss_Sign,
        ua.SecurityPolicyType.Aes256Sha256RsaPss_SignAndEncrypt,
    ),
}

COUNTS = {"value_reads": 0, "reads": 0, "sessions": 0, "monitored_items": 0}


def counting(internal, namespace):
    """Count the Read requests (and the Value attributes of this peer's own nodes, in
    `namespace`, among them), sessions and monitored items clients ask for (not the
    server's own `internal` session): `stats` answers them."""
    read, create_session, create_items = (
        InternalSession.read,
        InternalSession.create_session,
        InternalSession.create_monitored_items,
    )

    async def counted_read(self, params):
        if self is not internal:
            COUNTS["reads"] += 1
            COUNTS["value_reads"] += sum(
                1
                for r in params.NodesToRead
                if r.AttributeId == ua.AttributeIds.Value and r.NodeId.NamespaceIndex == namespace
            )
        return await read(self, params)

    async def counted_session(self, *args, **kwargs):
        COUNTS["sessions"] += 1
        return await create_session(self, *args, **kwargs)

    async def counted_items(self, params):
        COUNTS["monitored_items"] += len(params.ItemsToCreate)
        return await create_items(self, params)

    InternalSession.read = counted_read
    InternalSession.create_session = counted_session
    InternalSession.create_monitored_items = counted_items


def make_cert(directory, name, uri):
    """A self-signed RSA 2048 application instance certificate for loopback:
    DIRECTORY/NAME-cert.der and NAME-key.pem."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(uri),
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=True,
                key_encipherment=True,
                data_encipherment=True,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}-cert.der", directory / f"{name}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.DER))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return {"cert": str(cert_path), "key": str(key_path)}


def trusting(paths):
    """A validator that trusts exactly the client certificates named (DER or PEM)."""
    trusted = set()
    for path in paths:
        data = Path(path).read_bytes()
        cert = (
            x509.load_pem_x509_certificate(data)
            if data.startswith(b"-----")
            else x509.load_der_x509_certificate(data)
        )
        trusted.add(cert.public_bytes(serialization.Encoding.DER))

    async def validate(cert, _app_description):
        if cert.public_bytes(serialization.Encoding.DER) not in trusted:
            raise ServiceError(ua.StatusCodes.BadCertificateUntrusted)

    return validate


class Peer:
    def __init__(self, server, nodes):
        self.server = server
        self.nodes = nodes  # name -> Node
        self.values = {name: value for name, (_, value) in NODES.items()}
        self.writes = 0

    async def write(self, name, value, status):
        node = self.nodes[name]
        variant = NODES[name][0]
        now = datetime.datetime.now(datetime.timezone.utc)
        await self.server.write_attribute_value(
            node.nodeid,
            ua.DataValue(
                ua.Variant(value, variant),
                StatusCode=ua.StatusCode(getattr(ua.StatusCodes, status)),
                SourceTimestamp=now,
                ServerTimestamp=now,
            ),
        )
        self.values[name] = value
        self.writes += 1

    def node(self, request):
        name = request["node"]
        if name not in self.nodes:
            raise ValueError(f"no node {name!r} here: {', '.join(self.nodes)}")
        return name

    async def answer(self, request):
        op = request.get("op")
        if op == "set":
            name = self.node(request)
            variant = NODES[name][0]
            value = request["value"]
            if variant == ua.VariantType.Int32:
                value = int(value)
            elif variant == ua.VariantType.Boolean:
                value = bool(value)
            elif variant == ua.VariantType.Double:
                value = float(value)
            await self.write(name, value, request.get("status", "Good"))
            return {}
        if op == "status":
            name = self.node(request)
            code = request["code"]
            if not hasattr(ua.StatusCodes, code):
                raise ValueError(f"no status code {code!r}")
            await self.write(name, self.values[name], code)
            return {}
        if op == "stats":
            return {**COUNTS, "writes": self.writes}
        raise ValueError(f"unknown op {op!r}")


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, help="the port to serve on (127.0.0.1)")
    parser.add_argument("--path", default="/grid/", help="the endpoint's path")
    parser.add_argument("--security", choices=["none", "sign", "sign-and-encrypt"], default="none")
    parser.add_argument("--policy", choices=list(POLICIES), default="Basic256Sha256")
    parser.add_argument("--cert", help="the server's certificate (DER)")
    parser.add_argument("--key", help="the server's private key (PEM)")
    parser.add_argument("--trust", action="append", default=[], help="a client certificate to trust (DER or PEM)")
    parser.add_argument(
        "--make-cert",
        metavar="DIR",
        help="write DIR/NAME-cert.der and DIR/NAME-key.pem (--name, default server), print their paths, exit",
    )
    parser.add_argument("--name", default="server")
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="use DIR/server-cert.der and DIR/server-key.pem, made first when missing "
        "(with DIR/other-cert.der, a certificate this server never presents)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    if args.make_cert:
        print(json.dumps({"ok": True, **make_cert(args.make_cert, args.name, APPLICATION_URI)}), flush=True)
        return
    if args.port is None:
        parser.error("--port is required to serve")
    if args.cert_dir:
        directory = Path(args.cert_dir)
        if not (directory / "server-cert.der").exists():
            make_cert(directory, "other", APPLICATION_URI)
            make_cert(directory, "server", APPLICATION_URI)
        args.cert, args.key = str(directory / "server-cert.der"), str(directory / "server-key.pem")

    server = Server()
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:{args.port}{args.path}")
    server.set_server_name("Grid test peer")
    await server.set_application_uri(APPLICATION_URI)
    if args.security == "none":
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    else:
        if not (args.cert and args.key):
            parser.error(f"--security {args.security} needs --cert and --key")
        sign, encrypt = POLICIES[args.policy]
        server.set_security_policy([sign if args.security == "sign" else encrypt])
        await server.load_certificate(args.cert)
        await server.load_private_key(args.key)
        server.set_certificate_validator(trusting(args.trust))
    namespace = await server.register_namespace(NAMESPACE)
    counting(server.iserver.isession, namespace)
    folder = await server.nodes.objects.add_folder(namespace, "Grid")
    nodes = {}
    for name, (variant, value) in NODES.items():
        node = await folder.add_variable(ua.NodeId(name, namespace), name, ua.Variant(value, variant))
        nodes[name] = node
    peer = Peer(server, nodes)
    async with server:
        print(json.dumps({"ready": True, "port": args.port, "namespace": namespace}), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if request.get("op") == "stop":
                    print(json.dumps({"ok": True}), flush=True)
                    break
                answer = {"ok": True, **await peer.answer(request)}
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
