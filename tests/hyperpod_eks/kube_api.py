"""A real local Kubernetes-API-shaped HTTPS server for the usage observer's tests: a certificate
authority and a server certificate for 127.0.0.1 made here, ``http.server`` in a thread, and
ClusterQueue objects shaped as Kueue v1beta1 serves them (every optional field set)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"


@dataclass
class Authority:
    key: Any
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def eks_data(self) -> str:
        """As DescribeCluster's certificateAuthority.data: the PEM, base64."""
        return base64.b64encode(self.pem).decode()


def _key_usage(**on: bool) -> x509.KeyUsage:
    names = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{n: on.get(n, False) for n in names})


def authority(name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def server_certificate(ca: Authority, directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_encipherment=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    cert_file, key_file = directory / "server.pem", directory / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@dataclass
class Reply:
    status: int
    body: Any
    delay: float = 0.0


@dataclass
class KubeApi:
    """``respond(path, query, headers) -> Reply`` decides each answer; ``requests`` records them."""

    url: str
    ca: Authority
    respond: Callable[[str, dict[str, str], dict[str, str]], Reply]
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = field(default_factory=list)
    bodies: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, JSON body) of each write


def serve(directory: Path) -> tuple[KubeApi, Callable[[], None]]:
    ca = authority("kubernetes")
    cert_file, key_file = server_certificate(ca, directory)
    api = KubeApi(url="", ca=ca, respond=lambda path, query, headers: Reply(404, {}))

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            api.bodies.append(("PATCH", urllib.parse.urlsplit(self.path).path, body))
            self.do_GET()

        def do_GET(self):
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            headers = {k.lower(): v for k, v in self.headers.items()}
            api.requests.append((parts.path, query, headers))
            reply = api.respond(parts.path, query, headers)
            time.sleep(reply.delay)
            body = json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # the client gave up (its timeout): as a real server would, carry on

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    api.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()

    return api, stop


# --- Kueue v1beta1 objects ------------------------------------------------------------------------


def cluster_queue(
    name: str, *, cohort: str | None, flavors: dict[str, dict[str, Any]], workloads: tuple[int, int, int] = (2, 1, 1)
) -> dict[str, Any]:
    """A ClusterQueue as the API server returns it, with every optional field. ``flavors``:
    flavor -> {"nominal", "total", "borrowed", and optionally "lending_limit", "borrowing_limit",
    "reserved" (default: total)} in GPUs; ``workloads``: pending, reserving, admitted."""

    def quota(resource: str, nominal: Any, figures: dict[str, Any]) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
        if resource == GPU and figures.get("borrowing_limit") is not None:
            entry["borrowingLimit"] = str(figures["borrowing_limit"])
        if resource == GPU and figures.get("lending_limit") is not None:
            entry["lendingLimit"] = str(figures["lending_limit"])
        return entry

    def usage(figures: dict[str, Any], field: str = "total") -> list[dict[str, Any]]:
        gpus = figures.get(field, figures.get("total", 0))
        return [
            {"name": "cpu", "total": f"{gpus * 12}", "borrowed": "0"},
            {"name": "memory", "total": f"{gpus * 100}Gi", "borrowed": "0"},
            {"name": GPU, "total": str(gpus), "borrowed": str(figures.get("borrowed", 0))},
            {"name": EFA, "total": str(gpus // 2), "borrowed": "0"},
        ]

    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name.removesuffix("-clusterqueue")}},
        "queueingStrategy": "BestEffortFIFO",
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        "preemption": {
            "reclaimWithinCohort": "LowerPriority",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            "withinClusterQueue": "LowerPriority",
        },
        "stopPolicy": "None",
        "fairSharing": {"weight": "40"},
        "admissionChecksStrategy": {"admissionChecks": [{"name": "capacity-check", "onFlavors": sorted(flavors)}]},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU, EFA],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            quota("cpu", str(f["nominal"] * 12), f),
                            quota("memory", f"{f['nominal'] * 100}Gi", f),
                            quota(GPU, str(f["nominal"]), f),
                            quota(EFA, str(f["nominal"] // 2), f),
                        ],
                    }
                    for flavor, f in flavors.items()
                ],
            }
        ],
    }
    if cohort is not None:
        spec["cohort"] = cohort
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "81234",
            "generation": 3,
            "creationTimestamp": "2027-01-10T08:00:00Z",
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "labels": {"example.com/owner": "task-governance"},
            "annotations": {"example.com/note": "labels and annotations are not read"},
            "managedFields": [
                {
                    "manager": "kueue",
                    "operation": "Update",
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "time": "2027-01-15T07:00:00Z",
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {}},
                }
            ],
        },
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": "2027-01-10T08:00:05Z",
                    "observedGeneration": 3,
                }
            ],
            "flavorsReservation": [
                {"name": flavor, "resources": usage(f, "reserved")} for flavor, f in flavors.items()
            ],
            "flavorsUsage": [{"name": flavor, "resources": usage(f)} for flavor, f in flavors.items()],
            **dict(zip(("pendingWorkloads", "reservingWorkloads", "admittedWorkloads"), workloads, strict=False)),
            "pendingWorkloadsStatus": {
                "clusterQueuePendingWorkload": [{"name": "job-a-1", "namespace": "hyperpod-ns-x"}],
                "lastChangeTime": "2027-01-15T07:00:00Z",
            },
            "fairSharing": {
                "weightedShare": 125,
                "admissionFairSharingStatus": {"consumedResources": {GPU: "4"}, "lastUpdate": "2027-01-15T07:00:00Z"},
            },
        },
    }


def pages(items: list[dict[str, Any]], size: int) -> Callable[[str, dict[str, str], dict[str, str]], Reply]:
    """A ClusterQueueList served ``size`` items a page, with opaque continue tokens."""

    def respond(path, query, headers):
        if path != "/apis/kueue.x-k8s.io/v1beta1/clusterqueues":
            return Reply(
                404, status_object(404, "NotFound", f"the server could not find the requested resource ({path})")
            )
        start = int(base64.urlsafe_b64decode(query["continue"]).decode().split(":")[1]) if "continue" in query else 0
        end = start + size
        metadata: dict[str, Any] = {"resourceVersion": "81234"}
        if end < len(items):
            metadata["continue"] = base64.urlsafe_b64encode(f"rv81234:{end}".encode()).decode()
            metadata["remainingItemCount"] = len(items) - end
        return Reply(
            200,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueueList",
                "metadata": metadata,
                "items": items[start:end],
            },
        )

    return respond


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
