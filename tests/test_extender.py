"""The extender over real HTTP (no cluster): protocol field names, pass-through, planned node, the
answers to malformed and hostile requests, TLS with and without client certificates."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from soda_operator.soda import extender


@pytest.fixture(scope="module")
def url():
    srv = extender.serve("127.0.0.1", 0, max_body=1 << 20, read_timeout=1.0)
    yield srv.url
    srv.stop()


def call(url, verb, data: bytes, ctype="application/json", ctx=None):
    req = urllib.request.Request(f"{url}/{verb}", data=data, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post(url, verb, body, ctx=None):
    code, out = call(url, verb, json.dumps(body).encode(), ctx=ctx)
    assert code == 200, out
    return out


def pod(planned=None, job=True):
    md = {"name": "p", "namespace": "ns", "labels": {"kubesoda.io/job": "j"} if job else {}}
    if planned:
        md["annotations"] = {"kubesoda.io/node": planned}
    return {"metadata": md, "spec": {"containers": [{"name": "c", "image": "pause"}]}}


def test_node_names_filter_keeps_only_the_planned_node(url):
    out = post(url, "filter", {"Pod": pod("n2"), "NodeNames": ["n1", "n2", "n3"]})
    # the other nodes are left out without a reason: the pod is placed, nobody reads them
    assert out["NodeNames"] == ["n2"] and out["FailedNodes"] == {}
    assert out["Error"] == "" and out["FailedAndUnresolvableNodes"] == {}


def test_full_nodes_filter_when_not_node_cache_capable(url):
    nodes = {"items": [{"metadata": {"name": n, "labels": {"zone": "z"}}, "status": {"allocatable": {"cpu": "4"}}} for n in ("n1", "n2")]}
    out = post(url, "filter", {"Pod": pod("n1"), "Nodes": nodes, "NodeNames": None})
    assert out["Nodes"]["items"] == nodes["items"][:1] and out["NodeNames"] is None  # the node comes back whole


def test_foreign_pods_pass_untouched(url):
    names = ["a", "b", "c"]
    assert post(url, "filter", {"Pod": pod("b", job=False), "NodeNames": names})["NodeNames"] == names
    assert post(url, "prioritize", {"Pod": pod(job=False), "NodeNames": names}) == [{"Host": n, "Score": 0} for n in names]


def test_prioritize_scores_the_planned_node(url):
    assert post(url, "prioritize", {"Pod": pod("b"), "NodeNames": ["a", "b"]}) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 10}]


def test_planned_node_gone_filters_everything_out_with_reasons(url):
    out = post(url, "filter", {"Pod": pod("gone"), "NodeNames": ["a", "b"]})
    assert out["NodeNames"] == [] and out["FailedNodes"] == {"a": extender.NOT_PLANNED, "b": extender.NOT_PLANNED}


@pytest.mark.parametrize("body, where", [
    (b'{"Pod": 5}', "Pod"),
    (b"[]", "body"),
    (b"", "body"),
    (b"{not json", "body"),
    (b'{"NodeNames": ["a"]}', "Pod"),
    (b'{"Pod": {"metadata": {"labels": {"kubesoda.io/job": 3}}}, "NodeNames": ["a"]}', "Pod.metadata.labels"),
    (b'{"Pod": {}, "NodeNames": "abc"}', "NodeNames"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items.0.metadata.name"),
    ('{"Pod": {}, "NodeNames": ["\u00e9"]}'.encode("latin-1"), "body"),  # not UTF-8
])
def test_malformed_bodies_get_a_400_naming_the_field(url, body, where):
    for verb in ("filter", "prioritize"):
        code, out = call(url, verb, body)
        assert code == 400 and out["Error"].startswith("kubesoda extender: bad request"), out
        assert where in out["Error"] or where == "body", out


def test_unknown_verb_and_path(url):
    code, out = call(url, "bind", b"{}")
    assert code == 404 and "bind" in out["Error"]
    for path, status in (("a/b", 404), ("filter", 405)):  # no such path; a verb is POSTed
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{url}/{path}", timeout=5)
        assert e.value.code == status


def raw(url: str, request: bytes, wait: float = 5.0) -> bytes:
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(request)
        out = b""
        try:  # one whole response (the server may linger on the connection to drain a refused body)
            while chunk := s.recv(65536):
                out += chunk
                head, sep, body = out.partition(b"\r\n\r\n")
                length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
                if sep and length and len(body) >= length[0]:
                    break
        except TimeoutError:
            pass
        return out


def test_a_huge_content_length_is_refused_without_reading_it(url):
    out = raw(url, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 1000000000000\r\nConnection: close\r\n\r\n{")
    assert out.startswith(b"HTTP/1.1 413") and b"over the limit" in out


def test_a_body_over_the_limit_without_content_length_is_refused(url):
    chunk = b"a" * (256 * 1024)
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(8)) + b"0\r\n\r\n"  # 2 MiB, chunked
    out = raw(url, b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 413")


def test_a_body_that_never_arrives_times_out(url):
    out = raw(url, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{", wait=5.0)
    assert out.startswith(b"HTTP/1.1 408")


def test_health_and_metrics(url):
    assert urllib.request.urlopen(f"{url}/healthz", timeout=5).read() == b"ok"
    post(url, "filter", {"Pod": pod("a"), "NodeNames": ["a"]})
    call(url, "filter", b"[]")
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    assert "kubesoda_extender_seconds" in text and 'kubesoda_extender_errors_total{code="400"}' in text


# ------------------------------------------------------------------------------------------- TLS
@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    d = tmp_path_factory.mktemp("pki")

    def run(*a):
        subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
            "-out", f"{name}.crt", *(["-extfile", "san.ext"] if name == "server" else []))
    return d


def test_tls_serves_the_protocol_and_verifies_against_the_ca(pki):
    srv = extender.serve("127.0.0.1", 0, extender.tls_context(str(pki / "server.crt"), str(pki / "server.key")))
    try:
        assert srv.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        assert post(srv.url, "filter", {"Pod": pod("b"), "NodeNames": ["a", "b"]}, ctx=ctx)["NodeNames"] == ["b"]
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to a TLS port gets nowhere
            urllib.request.urlopen(srv.url.replace("https", "http") + "/healthz", timeout=5)
        with pytest.raises(urllib.error.URLError):  # nor does a client that does not trust the CA
            urllib.request.urlopen(srv.url + "/healthz", timeout=5, context=ssl.create_default_context())
    finally:
        srv.stop()


def test_tls_with_client_ca_requires_a_client_certificate_for_the_verbs(pki, tmp_path):
    ctx_server = extender.tls_context(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    srv = extender.serve("127.0.0.1", 0, ctx_server)
    body = json.dumps({"Pod": pod("b"), "NodeNames": ["a", "b"]}).encode()
    try:
        anon = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        code, out = call(srv.url, "filter", body, ctx=anon)
        assert code == 403 and "client certificate" in out["Error"]
        assert urllib.request.urlopen(srv.url + "/healthz", timeout=5, context=anon).read() == b"ok"  # probes need none
        mtls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        mtls.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
        assert call(srv.url, "filter", body, ctx=mtls) == (200, {"NodeNames": ["b"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})
        # a certificate from another CA is refused in the handshake
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "o.key",
                        "-out", "o.crt", "-subj", "/CN=other"], cwd=tmp_path, check=True, capture_output=True)
        other = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        other.load_cert_chain(str(tmp_path / "o.crt"), str(tmp_path / "o.key"))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            call(srv.url, "filter", body, ctx=other)
    finally:
        srv.stop()


def test_tls_settings_are_checked(pki):
    with pytest.raises(ValueError, match="both"):
        extender.tls_context(str(pki / "server.crt"), None)
    with pytest.raises(ValueError, match="needs"):
        extender.tls_context(None, None, str(pki / "ca.crt"))
    assert extender.tls_context(None, None) is None
