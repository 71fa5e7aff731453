"""The Helm chart against the real API server, kube-scheduler and settings loader.

- ``helm template`` renders with default values, with policies/overrides, and with
  cert-manager on (render only: cert-manager's CRDs are not installed here).
- The render is applied with ``kubectl apply --server-side --dry-run=server`` into a fresh
  namespace: the API server validates every object (schemas, webhook configurations,
  PDBs, RBAC role references) without persisting anything.
- The rendered settings file is loaded by ``bridge.config.Settings`` (``extra=forbid``)
  and the rendered KubeSchedulerConfiguration by the real kube-scheduler (strict decoding).
- RBAC: the service accounts, roles and bindings are applied for real, and each identity's
  effective permissions (``kubectl auth can-i --list --as=...``) must be exactly what that
  part of the bridge needs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from bridge import keys
from bridge.config import CONFIG_FILE_ENV, Settings
from bridge.policy.tenancy import TenancySource, Tenant
from slurmbridge_devkit.helm import (
    CHART,
    Manifest,
    helm_bin,
    kube_version,
    render,
    reviews_per_create,
    service_monitor_crd,
    template,
)
from slurmbridge_devkit.kube import BUILD, ControlPlane
from slurmbridge_devkit.prometheus import SLURMCTLD_METRICS

pytestmark = pytest.mark.e2e

RBAC_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                        "RoleBinding"})
CLUSTER_SCOPED = frozenset({"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                            "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                            "ValidatingAdmissionPolicyBinding"})

# `kubectl debug` on a pod (issue 41, case 6): both webhooks see the containers it adds.
EPHEMERAL_RULE = {"apiGroups": [""], "apiVersions": ["v1"],
                  "resources": ["pods/ephemeralcontainers"], "operations": ["UPDATE"],
                  "scope": "Namespaced"}

# (resource, resource name or "", verb) as `kubectl auth can-i --list` shows them.
Permission = tuple[str, str, str]


# --- helpers -------------------------------------------------------------------------


def kubectl(cp: ControlPlane, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    kubectl_bin = cp.bin_dir / "kubectl"
    if not os.access(kubectl_bin, os.X_OK):
        pytest.fail(f"kubectl is missing ({kubectl_bin}). Build it with: {BUILD}", pytrace=False)
    proc = subprocess.run(
        [str(kubectl_bin), "--kubeconfig", str(cp.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=120,
    )
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}{proc.stdout}"
    return proc


def dump(docs: list[Manifest]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def find(docs: list[Manifest], kind: str, suffix: str = "") -> Manifest:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    names = [h["metadata"]["name"] for h in hits]
    assert len(hits) == 1, f"expected one {kind} named *{suffix}, got {names}"
    return hits[0]


def release_name() -> str:
    return "hc" + uuid.uuid4().hex[:6]


PERMISSION_ROW = re.compile(
    r"^(?P<res>\S+)?\s+\[(?P<urls>[^\]]*)\]\s+\[(?P<names>[^\]]*)\]\s+\[(?P<verbs>[^\]]*)\]\s*$"
)


def permissions(cp: ControlPlane, user: str, namespace: str) -> set[Permission]:
    """Effective permissions of `user` in `namespace` (cluster-wide rules included)."""
    out = kubectl(cp, "auth", "can-i", "--list", f"--as={user}", "-n", namespace).stdout
    found: set[Permission] = set()
    for line in out.splitlines()[1:]:
        m = PERMISSION_ROW.match(line)
        assert m, f"unexpected `can-i --list` line: {line!r}"
        names = m["names"].split() or [""]
        targets = [m["res"]] if m["res"] else [f"url:{u}" for u in m["urls"].split()]
        found |= {(t, n, v) for t in targets for n in names for v in m["verbs"].split()}
    return found


def grants(rules: dict[str, list[str]]) -> set[Permission]:
    """{resource: verbs} as a permission set (no resource names)."""
    return {(res, "", verb) for res, verbs in rules.items() for verb in verbs}


def can(cp: ControlPlane, user: str, *args: str) -> bool:
    proc = kubectl(cp, "auth", "can-i", *args, f"--as={user}", check=False)
    answer = proc.stdout.strip()
    assert answer in {"yes", "no"}, f"can-i {args}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


def sa(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


# --- render only ---------------------------------------------------------------------


def _webhook_checks(docs: list[Manifest], release: str, namespace: str) -> None:
    for kind, verb in (("MutatingWebhookConfiguration", "mutate"),
                       ("ValidatingWebhookConfiguration", "validate")):
        config = find(docs, kind)
        assert release in config["metadata"]["name"] and namespace in config["metadata"]["name"]
        # One entry per way a pod is the bridge's (tests/e2e/test_webhook_scope.py).
        for hook in config["webhooks"]:
            assert hook["sideEffects"] == "None"
            assert hook["failurePolicy"] == "Fail"
            assert hook["admissionReviewVersions"] == ["v1"]
            assert hook["timeoutSeconds"] == 10
            assert "objectSelector" not in hook
            bridge = f"system:serviceaccount:{namespace}:{release}-slurmbridge-extender"
            assert hook["matchConditions"][0] == {
                "name": "not-the-bridge-updating",
                "expression": f"!(request.operation == 'UPDATE' && request.userInfo.username == "
                              f"'{bridge}')",
            }, "the bridge's own pod writes need no webhook call"
            assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"],
                                      "resources": ["pods"], "operations": ["CREATE", "UPDATE"],
                                      "scope": "Namespaced"},
                                     EPHEMERAL_RULE]
            expr = hook["namespaceSelector"]["matchExpressions"][0]
            assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
            assert set(expr["values"]) == {"kube-system", namespace}
            service = hook["clientConfig"]["service"]
            assert service == {"name": f"{release}-slurmbridge-webhook", "namespace": namespace,
                               "path": f"/{verb}", "port": 443}


def test_render_one_review_per_create_when_creates_are_not_validated_apart() -> None:
    """``webhook.validateCreates=false``: the mutating webhook mutates and checks a created
    pod in one review (``/admit``); the validating webhook keeps the updates."""
    docs = render(release_name(), "sb-render", "--set", "webhook.validateCreates=false")
    for kind, (path, operations) in {
        "MutatingWebhookConfiguration": ("/admit", ["CREATE", "UPDATE"]),
        "ValidatingWebhookConfiguration": ("/validate", ["UPDATE"]),
    }.items():
        for hook in find(docs, kind)["webhooks"]:
            assert hook["clientConfig"]["service"]["path"] == path
            assert hook["rules"][0]["operations"] == operations


def test_render_default_webhook_paths_are_ones_every_earlier_release_serves() -> None:
    """A rolling upgrade applies the new webhook configurations while old replicas still
    answer: a path they do not serve would refuse every create (404, failurePolicy Fail) until
    the rollout ends, so the default keeps to theirs (tests/kind/test_upgrade.py met it)."""
    paths = {hook["clientConfig"]["service"]["path"] for d in render(release_name(), "sb-render")
             if d["kind"].endswith("WebhookConfiguration") for hook in d["webhooks"]}
    assert paths == {"/mutate", "/validate"}


def test_render_self_signed_certificate() -> None:
    release, namespace = release_name(), "sb-render"
    docs = render(release, namespace)
    assert all(d["metadata"].get("namespace") == namespace
               for d in docs if d["kind"] not in CLUSTER_SCOPED
               and not (d["kind"] == "RoleBinding" and d["metadata"]["name"].endswith("reader")))
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert all(release in d["metadata"]["name"] for d in docs
                   if d["kind"] == kind), f"{kind} names must carry the release name"
    _webhook_checks(docs, release, namespace)

    secret = find(docs, "Secret", "-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert base64.b64decode(find(docs, kind)["webhooks"][0]["clientConfig"]["caBundle"]) \
            == ca_pem, "caBundle must be the CA that signed the serving certificate"
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    svc = f"{release}-slurmbridge-webhook"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) >= {
        f"{svc}.{namespace}.svc", f"{svc}.{namespace}.svc.cluster.local"}
    assert cert.issuer == ca.subject
    # ECDSA: the API server opens a TLS connection to the webhook per burst of creates.
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey), cert.public_key()
    _verify_signature(cert, ca)

    # A configurable failure policy.
    relaxed = render(release, namespace, "--set", "webhook.failurePolicy=Ignore")
    assert find(relaxed, "ValidatingWebhookConfiguration")["webhooks"][0]["failurePolicy"] \
        == "Ignore"


def _verify_signature(cert: x509.Certificate, ca: x509.Certificate) -> None:
    """Raises InvalidSignature unless ``ca``'s key (RSA or ECDSA) signed ``cert``."""
    key = ca.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                   cert.signature_hash_algorithm)
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(cert.signature, cert.tbs_certificate_bytes,
                   ec.ECDSA(cert.signature_hash_algorithm))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        _verify_signature(cert, ca)
    except InvalidSignature:
        return False
    return cert.issuer == ca.subject


def _pem(secret: Manifest, key: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"][key]))


def test_render_extender_mutual_tls_and_network_policy() -> None:
    """Only the chart's scheduler can call filter: its own client CA, a NetworkPolicy."""
    release, namespace = release_name(), "sb-mtls"
    docs = render(release, namespace, "--set", "webhook.excludeNamespaces={monitoring}")
    served = find(docs, "Secret", "-extender-tls")
    client = find(docs, "Secret", "-scheduler-extender-client")
    server_ca, client_ca = _pem(client, "ca.crt"), _pem(served, "client-ca.crt")
    serving, scheduler = _pem(served, "tls.crt"), _pem(client, "tls.crt")
    svc = f"{release}-slurmbridge-extender"
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) >= {f"{svc}.{namespace}.svc"}
    assert _signed_by(serving, server_ca) and _signed_by(scheduler, client_ca)
    # ECDSA: kube-scheduler opens a new connection for about every second call under load.
    assert all(isinstance(c.public_key(), ec.EllipticCurvePublicKey)
               for c in (serving, scheduler, server_ca, client_ca))
    # The extender's own CA opens nothing: no other certificate it signed is a client.
    assert server_ca.subject != client_ca.subject and not _signed_by(scheduler, server_ca)

    extender = find(docs, "Deployment", "-extender")["spec"]["template"]["spec"]
    (container,) = extender["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 8888, "health": 8889}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == "health"
    volumes = {v["name"]: v for v in extender["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == served["metadata"]["name"]

    policy = find(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] \
        == "extender"
    protocol, health = policy["spec"]["ingress"]
    (peer,) = protocol["from"]
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
    assert protocol["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert health == {"ports": [{"port": "health", "protocol": "TCP"}]}
    assert not [d for d in render(release, namespace,
                                  "--set", "extender.networkPolicy.enabled=false")
                if d["kind"] == "NetworkPolicy"]

    # The policy the API server enforces without the webhook: every namespace it skips.
    vap = find(docs, "ValidatingAdmissionPolicy", "-pods")
    uncovered = vap["spec"]["validations"][1]["expression"]
    for ns in ("kube-system", namespace, "monitoring"):
        assert f'"{ns}"' in uncovered
    assert find(docs, "ValidatingAdmissionPolicyBinding", "-pods")["spec"] == {
        "policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}


def test_render_cert_manager() -> None:
    release, namespace = release_name(), "sb-render"
    docs = render(release, namespace, "--set", "certManager.enabled=true")
    _webhook_checks(docs, release, namespace)
    # cert-manager owns the webhook's TLS Secret; the extender's mutual TLS stays Helm's.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == [
        f"{release}-slurmbridge-extender-tls", f"{release}-slurmbridge-scheduler-extender-client"]
    serving = find(docs, "Certificate", "-webhook-serving")
    svc = f"{release}-slurmbridge-webhook"
    assert serving["spec"]["secretName"] == f"{svc}-tls"
    assert set(serving["spec"]["dnsNames"]) == {f"{svc}.{namespace}.svc",
                                                f"{svc}.{namespace}.svc.cluster.local"}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = find(docs, kind)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] \
            == f"{namespace}/{serving['metadata']['name']}"
        assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    issuers = {d["metadata"]["name"] for d in docs if d["kind"] == "Issuer"}
    assert serving["spec"]["issuerRef"]["name"] in issuers

    # An existing issuer: the chart creates none of its own.
    docs = render(release, namespace, "--set", "certManager.enabled=true",
                  "--set", "certManager.issuerRef.name=corp-ca",
                  "--set", "certManager.issuerRef.kind=ClusterIssuer")
    assert not [d for d in docs if d["kind"] == "Issuer"]
    assert find(docs, "Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"  # the Prometheus Operator's CRD
SLURMCTLD = ("--api-versions", SERVICE_MONITOR, "--set", "monitoring.slurmctld.enabled=true",
             "--set", "monitoring.slurmctld.address=10.1.2.3",
             "--set", "monitoring.slurmctld.port=7817")


def _scrape_annotations(docs: list[Manifest]) -> dict[str, str]:
    template = find(docs, "Deployment", "-extender")["spec"]["template"]
    return {k: v for k, v in template["metadata"]["annotations"].items()
            if k.startswith("prometheus.io/")}


def test_render_monitoring() -> None:
    """Without the Prometheus Operator, scrape annotations on the extender pods; with its CRD,
    a ServiceMonitor on the extender's health port instead, and on request one for
    slurmctld's four metric sets (the ones the dashboard's Slurm row reads)."""
    release, namespace = release_name(), "sb-render"
    docs = render(release, namespace)
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    extender = find(docs, "Deployment", "-extender")["spec"]["template"]["spec"]
    health = next(p["containerPort"] for p in extender["containers"][0]["ports"]
                  if p["name"] == "health")
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(health),
                   "prometheus.io/path": "/metrics/"}
    assert _scrape_annotations(docs) == annotations
    docs = render(release, namespace, "--api-versions", SERVICE_MONITOR,
                  "--set", "monitoring.serviceMonitor.enabled=false")
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert _scrape_annotations(docs) == annotations

    docs = render(release, namespace, "--api-versions", SERVICE_MONITOR,
                  "--set-json", 'monitoring.serviceMonitor.labels={"release":"kps"}')
    assert _scrape_annotations(docs) == {}
    monitor, service = find(docs, "ServiceMonitor", "-extender"), find(docs, "Service", "-extender")
    assert monitor["metadata"]["labels"]["release"] == "kps"  # what a Prometheus selects
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [namespace]}
    endpoints = [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]]
    assert endpoints == [("health", "/metrics/")]
    assert {"name": "health", "port": health, "targetPort": "health", "protocol": "TCP"} \
        in service["spec"]["ports"]

    docs = render(release, namespace, *SLURMCTLD)
    ctld = find(docs, "ServiceMonitor", "-slurmctld")
    assert [(e["port"], e["path"], e["relabelings"]) for e in ctld["spec"]["endpoints"]] == [
        ("metrics", f"/metrics/{name}", [{"targetLabel": "endpoint", "replacement": name}])
        for name in SLURMCTLD_METRICS]
    service = find(docs, "Service", "-slurmctld")
    assert "selector" not in service["spec"]  # slurmctld runs outside: its address is given
    assert ctld["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert find(docs, "Endpoints", "-slurmctld")["subsets"] == [{
        "addresses": [{"ip": "10.1.2.3"}],
        "ports": [{"name": "metrics", "port": 7817, "protocol": "TCP"}]}]

    # slurmctld without the operator's CRD: refused, saying what to do instead.
    proc = template(release, namespace, *SLURMCTLD[2:])
    assert proc.returncode != 0
    assert "static config of docs/operations.md" in proc.stderr, proc.stderr


def test_render_managed_node_and_ephemeral_container_policies() -> None:
    """Issue 41, cases 5 and 6: the policies keeping other pods off Slurm's nodes (the admin's
    list rendered into them) and GPU choices out of ephemeral containers (the bridge's own
    GPU variables, as bridge/keys.py spells them)."""
    release, namespace = release_name(), "sb-render"
    docs = render(release, namespace,
                  "--set-json", 'managedNodes.daemonSets=["gpu-operator/nvidia-device-plugin"]',
                  "--set-json", 'managedNodes.serviceAccounts=["node-debug/default"]',
                  "--set-json", 'managedNodes.validationActions=["Warn","Audit"]')
    tolerations = find(docs, "ValidatingAdmissionPolicy", "-managed-nodes")["spec"]
    names = find(docs, "ValidatingAdmissionPolicy", "-managed-node-names")["spec"]
    for spec in (tolerations, names):
        conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
        listed = conditions["not-listed-in-managed-nodes"]
        assert '"gpu-operator/nvidia-device-plugin"' in listed, listed
        assert '"node-debug/default"' in listed, listed
        assert "kube-system/kube-proxy" not in listed, "the admin's list replaces the default"
        assert "system:serviceaccount:kube-system:daemon-set-controller" in listed, listed
        assert f"'{keys.SCHEDULER_NAME}'" in conditions["not-placed-by-slurmbridge"]
    assert keys.MANAGED_TAINT in tolerations["variables"][0]["expression"]
    assert names["paramKind"] == {"apiVersion": "v1", "kind": "Node"}
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "-managed-node-names")["spec"]
    assert binding["paramRef"] == {"selector": {"matchLabels": {keys.MANAGED_NODE_LABEL: "true"}},
                                   "parameterNotFoundAction": "Allow"}
    assert binding["validationActions"] == ["Warn", "Audit"]

    ephemeral = find(docs, "ValidatingAdmissionPolicy", "-ephemeral-containers")["spec"]
    (rule,) = ephemeral["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods/ephemeralcontainers"]
    gpu_env = next(v["expression"] for v in ephemeral["variables"] if v["name"] == "gpuEnv")
    assert json.loads(gpu_env) == {name: f"metadata.annotations['{source}']"
                                   for name, source in keys.GPU_ENV_SOURCES.items()}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in find(docs, kind)["webhooks"]:
            assert EPHEMERAL_RULE in hook["rules"], hook["rules"]

    # An entry that is not namespace/name: refused, naming it.
    proc = template(release, namespace, "--set-json", 'managedNodes.daemonSets=["kube-proxy"]')
    assert proc.returncode != 0
    assert 'managedNodes.daemonSets: "kube-proxy" is not namespace/name' in proc.stderr, proc.stderr


def test_rendered_settings_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings file the chart writes is one the bridge accepts, with what values said."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "slurm": {"url": "http://slurm.example:6820", "user": "k8s", "dataParser": "v0.0.42",
                  "jwt": {"secretName": "jwt", "key": "auth-token"}},
        "admission": {
            "enrolledNamespaces": ["ml", "physics"],
            "defaultPolicy": {"partitions": ["gpu"]},
            "policies": {"physics": {"accounts": ["physics"], "qos": ["normal", "high"]}},
        },
        "config": {"placement": {"poll_interval_seconds": 0.5},
                   "slurm": {"timeout_seconds": 20, "token_file": "/ignored"}},
    }))
    namespace = "sb-settings"
    docs = render("rel", namespace, "-f", str(values))
    settings = _rendered_settings(docs, tmp_path, monkeypatch)
    assert settings.slurm.url == "http://slurm.example:6820"
    assert settings.slurm.user == "k8s"
    assert settings.slurm.data_parser == "v0.0.42"
    assert settings.slurm.timeout_seconds == 20
    assert settings.slurm.token_file == Path("/var/run/secrets/slurmbridge/slurm/auth-token")
    assert settings.placement.poll_interval_seconds == 0.5
    assert settings.extender.port == 8888 and settings.extender.health_port == 8889
    assert settings.admission.policy_for("ml").max_priority is None  # nothing granted
    assert settings.admission.enrolled_namespaces == ["ml", "physics"]
    assert settings.admission.policy_for("physics").accounts == ["physics"]
    assert settings.admission.policy_for("physics").qos == ["normal", "high"]
    assert settings.admission.policy_for("ml").partitions == ["gpu"]
    # The webhook trusts bridge-owned annotations from the extender's service account only.
    extender = find(docs, "Deployment", "-extender")["spec"]["template"]["spec"]
    assert settings.admission.bridge_user == sa(namespace, extender["serviceAccountName"])
    assert settings.admission.excluded_namespaces == {"kube-system", namespace}
    env = {e["name"]: e["value"] for e in extender["containers"][0]["env"]}
    assert env["SLURMBRIDGE_SLURM__TOKEN_FILE"] == str(settings.slurm.token_file)
    mounts = {v["name"]: v for v in extender["volumes"]}
    assert mounts["slurm-jwt"]["secret"]["secretName"] == "jwt"
    # The extender's TLS files are where its Secret is mounted.
    tls_dir = next(m["mountPath"] for m in extender["containers"][0]["volumeMounts"]
                   if m["name"] == "tls")
    for path in (settings.extender.tls_cert_file, settings.extender.tls_key_file,
                 settings.extender.client_ca_file):
        assert path is not None and str(path).startswith(tls_dir)
    # The webhook gets the settings but not the Slurm token.
    webhook = find(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]
    assert "slurm-jwt" not in {v["name"] for v in webhook["volumes"]}
    assert settings.admission.tls_cert_file is not None
    assert str(settings.admission.tls_cert_file).startswith(
        next(m["mountPath"] for m in webhook["containers"][0]["volumeMounts"]
             if m["name"] == "tls"))


def _rendered_settings(
    docs: list[Manifest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The settings the bridge loads from the chart's ConfigMap, and nothing else."""
    settings_file = tmp_path / "settings.yaml"
    config_map = find(docs, "ConfigMap", "-slurmbridge-config")
    settings_file.write_text(config_map["data"]["settings.yaml"])
    for name in list(os.environ):
        if name.startswith("SLURMBRIDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(CONFIG_FILE_ENV, str(settings_file))
    return Settings()


def test_rendered_slurm_tls_points_at_the_mounted_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurm.tls values: the CA bundle and client certificate Secrets are mounted into the
    extender and the doctor hook (not the webhook, which never talks to Slurm), and the
    settings name the files where they are mounted; TLS values with an http:// URL are
    refused at render, naming both."""
    flags = ("--set", "slurm.url=https://10.0.0.5:6820", "--set", "slurm.tls.caSecret=site-ca",
             "--set", "slurm.tls.caKey=bundle.pem", "--set", "slurm.tls.clientSecret=client",
             "--set", "slurm.tls.serverName=slurmrestd.example")
    docs = render("rel", "sb-tls", *flags)
    tls = _rendered_settings(docs, tmp_path, monkeypatch).slurm.tls
    assert tls.server_name == "slurmrestd.example"
    wanted = {"site-ca": {tls.ca_file}, "client": {tls.cert_file, tls.key_file}}
    for spec in (find(docs, "Deployment", "-extender")["spec"]["template"]["spec"],
                 find(docs, "Pod", "-doctor")["spec"]):
        (container,) = spec["containers"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        for volume in spec["volumes"]:
            files = wanted.get(volume.get("secret", {}).get("secretName"), set())
            for path in files:
                items = {i["path"] for i in volume["secret"]["items"]}
                assert path is not None and path.parent == Path(mounts[volume["name"]])
                assert path.name in items
        assert {v.get("secret", {}).get("secretName") for v in spec["volumes"]} >= set(wanted)
    webhook = find(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]
    assert not {"site-ca", "client"} & {v.get("secret", {}).get("secretName")
                                         for v in webhook["volumes"]}
    proc = template("rel", "sb-tls", *flags, "--set", "slurm.url=http://10.0.0.5:6820")
    assert proc.returncode != 0
    assert "slurm.tls is set but slurm.url http://10.0.0.5:6820 is not https://" in proc.stderr


def test_rendered_tenancy_loads_and_changes_without_a_rollout(tmp_path: Path) -> None:
    """tenancy.* values become the file both processes read, mounted as a directory (updates
    reach the running pods) and outside the config checksum (a change rolls nothing)."""
    tenancy = {"namespaces": {"team-a": {"account": "team-a", "user": "alice",
                                         "qos": ["normal", "low"]}},
               "priorityClasses": {"batch-low": "low"}}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"slurm": {"jwt": {"secretName": "jwt"}},
                                      "tenancy": tenancy}))
    docs = render("rel", "sb-tenancy", "-f", str(values))
    settings = yaml.safe_load(find(docs, "ConfigMap", "-slurmbridge-config")["data"]
                              ["settings.yaml"])
    path = Path(settings["admission"]["tenancy_file"])
    rendered = tmp_path / path.name
    rendered.write_text(find(docs, "ConfigMap", "-slurmbridge-tenancy")["data"][path.name])
    mapping = TenancySource(rendered).current()
    assert mapping.tenant("team-a") == Tenant(account="team-a", user="alice",
                                              qos=["normal", "low"])
    assert mapping.tenant("other") is None  # no default: refused, naming what to configure
    assert mapping.priority_classes == {"batch-low": "low"}
    for name in ("-extender", "-webhook"):
        pod = find(docs, "Deployment", name)["spec"]["template"]["spec"]
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tenancy")
        assert mount["mountPath"] == str(path.parent) and "subPath" not in mount
    values.write_text(yaml.safe_dump({"slurm": {"jwt": {"secretName": "jwt"}},
                                      "tenancy": {**tenancy, "default": {}}}))
    changed = render("rel", "sb-tenancy", "-f", str(values))
    for name in ("-extender", "-webhook"):
        assert (find(docs, "Deployment", name)["spec"]["template"]
                == find(changed, "Deployment", name)["spec"]["template"])
    assert "default" in find(changed, "ConfigMap", "-slurmbridge-tenancy")["data"][path.name]


def test_scheduler_config_accepted_by_kube_scheduler(control_plane: ControlPlane,
                                                     tmp_path: Path) -> None:
    """The real kube-scheduler v1.37 decodes (strictly) and validates the rendered config."""
    docs = render("rel", "sb-sched")
    config = yaml.safe_load(find(docs, "ConfigMap", "-scheduler-config")["data"]["config.yaml"])
    assert config["profiles"] == [{"schedulerName": keys.SCHEDULER_NAME}]
    assert config["percentageOfNodesToScore"] == 100
    assert config["leaderElection"]["leaderElect"] is True
    assert config["leaderElection"]["resourceNamespace"] == "sb-sched"
    assert config["leaderElection"]["resourceName"] not in {"kube-scheduler", ""}
    (ext,) = config["extenders"]
    assert ext["urlPrefix"] == "https://rel-slurmbridge-extender.sb-sched.svc:8888"
    assert ext["enableHTTPS"] is True
    # The client certificate and the CA the scheduler checks the extender with, mounted.
    mount = next(m["mountPath"] for m in find(docs, "Deployment", "-scheduler")["spec"][
        "template"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "extender-client")
    assert ext["tlsConfig"] == {"certFile": f"{mount}/tls.crt", "keyFile": f"{mount}/tls.key",
                                "caFile": f"{mount}/ca.crt"}
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == (
        "filter", "prioritize", "bind")
    assert ext["nodeCacheCapable"] is True and ext["weight"] == 1
    assert ext["httpTimeout"] == "10s"

    # Outside a pod there is no in-cluster config: point it at a kubeconfig to get this far,
    # and at TLS files of the same shape as the mounted Secret (it opens them at start).
    config["clientConnection"] = {"kubeconfig": str(control_plane.kubeconfig)}
    ca = trustme.CA()
    client = ca.issue_cert("rel-slurmbridge-scheduler")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    client.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    ext["tlsConfig"] = {k: str(tmp_path / Path(v).name) for k, v in ext["tlsConfig"].items()}
    path, written = tmp_path / "config.yaml", tmp_path / "written.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [str(control_plane.bin_dir / "kube-scheduler"), f"--config={path}",
         "--secure-port=0", f"--write-config-to={written}"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    full = yaml.safe_load(written.read_text())
    assert full["extenders"][0]["bindVerb"] == "bind"
    assert full["leaderElection"]["resourceLock"] == "leases"


def test_lint_passes_and_a_values_typo_is_refused_naming_it() -> None:
    """values.schema.json (issue 44, build item 5): the defaults lint clean; a bad value or a
    misspelt key, at the top or nested, fails `helm template` (as install) naming it."""
    proc = subprocess.run([str(helm_bin()), "lint", str(CHART), *kube_version()],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for flags, named in [
        (("--set", "logLevel=loud"), ("/logLevel", "'debug', 'info', 'warning'")),
        (("--set", "monitoring.prometheusRule.tokenExpiryDayz=3"),
         ("/monitoring/prometheusRule", "'tokenExpiryDayz' not allowed")),
        (("--set", "config.placement.poll_interval_secondz=1"),
         ("/config/placement", "'poll_interval_secondz' not allowed")),
        (("--set", "admission.defaultPolicy.max_priority=10"),
         ("/admission/defaultPolicy", "'max_priority' not allowed")),
        (("--set", "webhook.failurePolicy=ignore"), ("/webhook/failurePolicy", "'Ignore'")),
    ]:
        proc = template(release_name(), "sb-render", *flags)
        assert proc.returncode != 0, f"{flags} rendered"
        for text in named:
            assert text in proc.stderr, f"{flags}: {proc.stderr}"


def test_helm_test_runs_doctor_as_the_extender() -> None:
    """`helm test`: a hook Pod running `slurmbridge doctor` with the extender's service
    account, environment and settings, tenancy and token mounts, so it checks what the
    extender would use."""
    docs = render(release_name(), "sb-render", "--set-json",
                  'extender.extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]')
    pod = find(docs, "Pod", "-doctor")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    extender = find(docs, "Deployment", "-extender")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == extender["serviceAccountName"]
    assert spec["restartPolicy"] == "Never"
    (doctor,), (served,) = spec["containers"], extender["containers"]
    assert doctor["args"][-1] == "doctor" and doctor["image"] == served["image"]
    assert doctor["env"] == served["env"]
    volumes = {v["name"]: v for v in extender["volumes"]}
    for mount in served["volumeMounts"]:
        if mount["name"] in ("config", "tenancy", "slurm-jwt"):
            assert mount in doctor["volumeMounts"]
            assert volumes[mount["name"]] in spec["volumes"]
    # Not one of the extender's pods: its Service never routes to the hook.
    selector = find(docs, "Service", "-extender")["spec"]["selector"]
    assert not selector.items() <= pod["metadata"]["labels"].items()


def test_uninstall_hook_runs_uninstall_as_the_extender() -> None:
    """`helm uninstall`: a pre-delete hook Job running `slurmbridge uninstall --yes` with the
    extender's service account, environment and settings mounts, naming the extender's
    Deployment to stop first; kept when it fails; none with `uninstall.hook=false`."""
    docs = render(release_name(), "sb-render", "--set", "uninstall.keepGatedPods=true")
    job = find(docs, "Job", "-uninstall")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert job["metadata"]["annotations"]["helm.sh/hook-delete-policy"] \
        == "before-hook-creation,hook-succeeded"
    deployment = find(docs, "Deployment", "-extender")
    spec, extender = job["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == extender["serviceAccountName"]
    (hook,), (served,) = spec["containers"], extender["containers"]
    assert hook["args"][2:] == ["uninstall", "--yes", "--extender-deployment",
                                deployment["metadata"]["name"], "--keep-gated-pods"]
    assert hook["env"] == served["env"] and hook["image"] == served["image"]
    for mount in served["volumeMounts"]:
        if mount["name"] in ("config", "tenancy", "slurm-jwt"):
            assert mount in hook["volumeMounts"]
    # the owner key, and only it of the extender's TLS Secret: it tells placeholders from forgeries
    config = find(docs, "ConfigMap", "-slurmbridge-config")["data"]["settings.yaml"]
    settings = yaml.safe_load(config)
    key_dir, _, key_file = settings["slurm"]["owner_key_file"].rpartition("/")
    (owner_key,) = [m for m in hook["volumeMounts"] if m["mountPath"] == key_dir]
    (volume,) = [v for v in spec["volumes"] if v["name"] == owner_key["name"]]
    assert volume["secret"]["items"] == [{"key": "owner-key", "path": key_file}]
    off = render(release_name(), "sb-render", "--set", "uninstall.hook=false")
    assert not [d for d in off if d["kind"] == "Job"]


# --- against the API server ----------------------------------------------------------


@pytest.fixture
def applied(control_plane: ControlPlane) -> Iterator[list[list[Manifest]]]:
    """Objects applied for real by a test; deleted afterwards (no GC runs here)."""
    batches: list[list[Manifest]] = []
    yield batches
    for docs in reversed(batches):
        kubectl(control_plane, "delete", "--ignore-not-found", "--wait=false", "-f", "-",
                stdin=dump(docs), check=False)


def test_server_side_dry_run(control_plane: ControlPlane, namespace: str) -> None:
    """Every object of the self-signed render passes the API server's validation."""
    variants: list[tuple[str, ...]] = [
        (),
        ("--set", "slurm.jwt.create=true", "--set", "slurm.jwt.token=eyJ.test.jwt",
         "--set", "admission.enrolledNamespaces={ml,physics}",
         "--set", "admission.policies.physics.accounts={physics}",
         "--set", "extender.replicas=3", "--set", "webhook.failurePolicy=Ignore",
         "--set", "webhook.excludeNamespaces={monitoring}",
         "--set", "priorityClassName=system-cluster-critical"),
    ]
    for flags in variants:
        # What an install applies: `helm test`'s hook Pod comes later (its own test below).
        docs = render(release_name(), namespace, "--skip-tests", *flags)
        proc = kubectl(control_plane, "apply", "--server-side", "--dry-run=server",
                       "--field-manager=slurmbridge-helm-test", "-f", "-",
                       stdin=dump(docs), check=False)
        assert proc.returncode == 0, f"dry-run apply failed ({flags}):\n{proc.stderr}"
        assert "error" not in proc.stderr.lower(), proc.stderr
        applied_lines = [ln for ln in proc.stdout.splitlines() if "(server dry run)" in ln]
        assert len(applied_lines) == len(docs), proc.stdout


def test_monitoring_objects_accepted(control_plane: ControlPlane, namespace: str,
                                    applied: list[list[Manifest]]) -> None:
    """The ServiceMonitors (the extender's, the webhook's, slurmctld's), the PrometheusRule,
    slurmctld's Service and Endpoints pass the API server's validation against the Prometheus
    Operator's own CRDs (installed for real, removed after)."""
    crds = [yaml.safe_load(service_monitor_crd(plural).read_text())
            for plural in ("servicemonitors", "prometheusrules")]
    applied.append(crds)
    kubectl(control_plane, "apply", "--server-side", "--field-manager=slurmbridge-helm-test",
            "-f", "-", stdin=dump(crds))
    for crd in crds:
        kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s",
                f"crd/{crd['metadata']['name']}")
    docs = [d for d in render(release_name(), namespace, *SLURMCTLD, "--api-versions",
                              "monitoring.coreos.com/v1/PrometheusRule")
            if d["kind"] in ("ServiceMonitor", "Service", "Endpoints", "PrometheusRule")]
    assert sorted(d["kind"] for d in docs) == [
        "Endpoints", "PrometheusRule", "Service", "Service", "Service", "ServiceMonitor",
        "ServiceMonitor", "ServiceMonitor"]
    proc = kubectl(control_plane, "apply", "--server-side", "--dry-run=server",
                   "--field-manager=slurmbridge-helm-test", "-f", "-", stdin=dump(docs),
                   check=False)
    assert proc.returncode == 0, f"dry-run apply failed:\n{proc.stderr}"
    assert len([ln for ln in proc.stdout.splitlines() if "(server dry run)" in ln]) == len(docs)


def _settled(cp: ControlPlane, namespace: str, name: str, replicas: int) -> None:
    """Until the deployment controller has seen the Deployment's last change and counts
    ``replicas`` pods (none runs here: no node)."""
    deadline = time.monotonic() + 60
    while True:
        got = json.loads(kubectl(cp, "-n", namespace, "get", "deployment", name,
                                 "-o", "json").stdout)
        status = got.get("status", {})
        if (status.get("observedGeneration") == got["metadata"]["generation"]
                and status.get("replicas", 0) == replicas):
            return
        assert time.monotonic() < deadline, f"deployment {name} never settled: {status}"
        time.sleep(0.2)


def test_one_review_per_create_where_no_earlier_webhook_replica_can_answer(
    control_plane: ControlPlane, namespace: str
) -> None:
    """``webhook.validateCreates: auto`` (the default) as ``helm install`` and ``helm
    upgrade`` render it, reading the cluster: one review per create on a first install and
    once this release's webhook has rolled out; two where a replica of an earlier release may
    still answer (it answers ``/admit`` with 404, refusing the create), and under ``helm
    template``, which cannot tell."""
    release = release_name()
    webhook = f"{release}-slurmbridge-webhook"
    cluster = ("--dry-run=server", "--kubeconfig", str(control_plane.kubeconfig))

    def reviews(*flags: str) -> str:
        return reviews_per_create(render(release, namespace, *flags))

    assert reviews(*cluster) == "one", "a first install: no earlier replica exists"
    assert reviews() == "two", "no cluster read"
    # An earlier release's webhook: its Deployment does not say it serves /admit.
    kubectl(control_plane, "-n", namespace, "create", "deployment", webhook,
            "--image=slurmbridge:earlier", "--replicas=1")
    _settled(control_plane, namespace, webhook, 1)
    assert reviews(*cluster) == "two"
    # A tenant's look-alike in its own namespace, marked as serving /admit, changes nothing:
    # only the release namespace's Deployment answers for the replicas that serve.
    tenant = f"{namespace}-tenant"
    kubectl(control_plane, "create", "namespace", tenant)
    try:
        kubectl(control_plane, "-n", tenant, "create", "deployment", webhook,
                "--image=slurmbridge:forged", "--replicas=0")
        kubectl(control_plane, "-n", tenant, "annotate", "deployment", webhook,
                "slurmbridge.io/webhook-paths=mutate,validate,admit")
        _settled(control_plane, tenant, webhook, 0)
        assert reviews(*cluster) == "two"
    finally:
        kubectl(control_plane, "delete", "namespace", tenant, "--wait=false", check=False)
    # This release's, rolled out (every replica of its template).
    kubectl(control_plane, "-n", namespace, "annotate", "deployment", webhook,
            "slurmbridge.io/webhook-paths=mutate,validate,admit")
    _settled(control_plane, namespace, webhook, 1)
    assert reviews(*cluster) == "one"
    # A rollout under way: the replica of the template before still serves.
    kubectl(control_plane, "-n", namespace, "set", "image", f"deployment/{webhook}",
            "*=slurmbridge:next")
    _settled(control_plane, namespace, webhook, 2)
    assert reviews(*cluster) == "two"
    # Set either way by hand, the value wins.
    for value, expected in (("false", "one"), ("true", "two")):
        assert reviews(*cluster, "--set", f"webhook.validateCreates={value}") == expected


def test_rbac_least_privilege(control_plane: ControlPlane, namespace: str,
                              applied: list[list[Manifest]]) -> None:
    release = release_name()
    docs = render(release, namespace)
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS
            and d["metadata"].get("namespace") != "kube-system"]
    # kube-system is not ours to write: its one RoleBinding (auth reader) is only dry-run.
    reader = [d for d in docs if d["metadata"].get("namespace") == "kube-system"]
    assert [d["roleRef"]["name"] for d in reader] == ["extension-apiserver-authentication-reader"]
    applied.append(rbac)
    kubectl(control_plane, "apply", "--server-side", "--field-manager=slurmbridge-helm-test",
            "-f", "-", stdin=dump(rbac))

    accounts = {d["metadata"]["name"].removeprefix(f"{release}-slurmbridge-"): d["metadata"]["name"]
                for d in rbac if d["kind"] == "ServiceAccount"}
    assert set(accounts) == {"extender", "webhook", "scheduler"}
    extender, webhook, scheduler = (sa(namespace, accounts[k])
                                    for k in ("extender", "webhook", "scheduler"))
    elsewhere = f"{namespace}-other"  # a namespace the release does not own
    baseline = permissions(control_plane, sa(namespace, "no-such-account"), namespace)

    extender_cluster = grants({
        "pods": ["get", "list", "watch", "patch"],
        "pods/status": ["patch"],
        "pods/binding": ["create"],
        "pods/eviction": ["create"],
        "nodes": ["get", "list", "watch", "patch"],
        "nodes/status": ["patch"],
        "namespaces": ["get", "list", "watch"],
        "events": ["create"],
        # DRA claims written with Slurm's GPUs (bridge/devices/)
        "resourceclaims.resource.k8s.io": ["get", "list", "patch"],
        "resourceclaims.resource.k8s.io/status": ["patch"],
        "resourceclaims.resource.k8s.io/binding": ["patch"],
        "resourceslices.resource.k8s.io": ["list"],
        "deviceclasses.resource.k8s.io": ["get"],
    })
    leases = grants({"leases.coordination.k8s.io": ["get", "list", "create", "update", "delete"]})
    # the uninstall hook scales the extender (and nothing else) to 0 first
    leases.add(("deployments.apps/scale", find(docs, "Deployment", "-extender")["metadata"]
                ["name"], "patch"))
    assert permissions(control_plane, extender, namespace) - baseline \
        == extender_cluster | leases
    assert permissions(control_plane, extender, elsewhere) - baseline == extender_cluster
    assert permissions(control_plane, webhook, namespace) - baseline == grants({
        "namespaces": ["get", "list", "watch"],
        # the owners that size a pod's group (admission/workloads.py)
        "jobs.batch": ["get"], "podgroups.scheduling.k8s.io": ["get"],
        "compositepodgroups.scheduling.k8s.io": ["get"], "workloads.scheduling.k8s.io": ["get"],
        "jobsets.jobset.x-k8s.io": ["get"],
        # a new group member's colleagues (admission/groups.py)
        "pods": ["list"],
        # a pod's DRA claims (admission/dra.py)
        "resourceclaims.resource.k8s.io": ["get"],
        "resourceclaimtemplates.resource.k8s.io": ["get"],
        "deviceclasses.resource.k8s.io": ["list"],
    })

    # The scheduler: exactly what the cluster's own kube-scheduler identity has (built-in
    # roles), plus its own lease in the release namespace.
    lease = find(docs, "Role", "-scheduler-leases")["rules"][1]["resourceNames"][0]
    user_baseline = permissions(control_plane, "slurmbridge-test-nobody", namespace)
    builtin = permissions(control_plane, "system:kube-scheduler", namespace) - user_baseline
    own_lease = {("leases.coordination.k8s.io", "", "create"),
                 ("leases.coordination.k8s.io", lease, "get"),
                 ("leases.coordination.k8s.io", lease, "update")}
    assert permissions(control_plane, scheduler, namespace) - baseline == builtin | own_lease
    assert permissions(control_plane, scheduler, elsewhere) - baseline \
        == (permissions(control_plane, "system:kube-scheduler", elsewhere)
            - permissions(control_plane, "slurmbridge-test-nobody", elsewhere))

    # The checks that matter most, asked the way the authorizer is asked.
    ns = ("-n", namespace)
    assert can(control_plane, extender, "create", "pods", "--subresource=binding", *ns)
    assert can(control_plane, extender, "create", "pods", "--subresource=eviction", "-A")
    assert can(control_plane, extender, "patch", "nodes")
    assert can(control_plane, extender, "update", "leases.coordination.k8s.io", *ns)
    for verb, resource in (("delete", "nodes"), ("get", "secrets"), ("list", "secrets"),
                           ("create", "pods"), ("delete", "pods"), ("update", "pods"),
                           ("patch", "namespaces"), ("create", "configmaps")):
        assert not can(control_plane, extender, verb, resource, "-A"), (verb, resource)
    assert not can(control_plane, extender, "update", "leases.coordination.k8s.io",
                   "-n", elsewhere)

    assert not can(control_plane, webhook, "create", "pods", "--subresource=binding", *ns)
    for verb, resource in (("patch", "pods"), ("get", "pods"), ("get", "secrets"),
                           ("create", "events"), ("patch", "nodes")):
        assert not can(control_plane, webhook, verb, resource, "-A"), (verb, resource)
    assert can(control_plane, webhook, "watch", "namespaces")

    assert can(control_plane, scheduler, "update", f"leases.coordination.k8s.io/{lease}", *ns)
    assert not can(control_plane, scheduler, "update", "leases.coordination.k8s.io/other", *ns)
    assert can(control_plane, scheduler, "create", "pods", "--subresource=binding", *ns)
    assert not can(control_plane, scheduler, "get", "secrets", "-A")


def test_upgrade_keeps_the_webhook_certificate(control_plane: ControlPlane, namespace: str,
                                               applied: list[list[Manifest]]) -> None:
    """With the cluster reachable (`lookup`), a re-render reuses the Secret's CA and cert."""
    release = release_name()
    first = render(release, namespace)
    secret = find(first, "Secret", "-webhook-tls")
    applied.append([secret])
    kubectl(control_plane, "apply", "--server-side", "--field-manager=slurmbridge-helm-test",
            "-f", "-", stdin=dump([secret]))

    again = render(release, namespace, "--dry-run=server",
                   "--kubeconfig", str(control_plane.kubeconfig))
    assert find(again, "Secret", "-webhook-tls")["data"] == secret["data"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert find(again, kind)["webhooks"][0]["clientConfig"]["caBundle"] \
            == secret["data"]["ca.crt"]
    # Without the cluster (plain `helm template`) a new CA is generated each time.
    assert find(render(release, namespace), "Secret", "-webhook-tls")["data"] != secret["data"]


def _install_dry_run(cp: ControlPlane, release: str,
                     namespace: str) -> subprocess.CompletedProcess[str]:
    """`helm install --dry-run=server`: the API server answers `lookup`, nothing is created."""
    return subprocess.run(
        [str(helm_bin()), "install", release, str(CHART), "--namespace", namespace,
         "--dry-run=server", "--kubeconfig", str(cp.kubeconfig)],
        capture_output=True, text=True, check=False, timeout=120)


def test_one_release_per_cluster(control_plane: ControlPlane, namespace: str,
                                 applied: list[list[Manifest]]) -> None:
    """A second release is refused at install, naming the first; the first one upgrades, and
    its install notes say how to check it.  (`lookup` needs the API server: with `helm
    template` the guard cannot see other releases.)"""
    first, second = release_name(), release_name()
    proc = _install_dry_run(control_plane, first, namespace)
    assert proc.returncode == 0, proc.stderr
    extender = f"{first}-slurmbridge-extender"
    assert f"kubectl -n {namespace} exec deploy/{extender} -- slurmbridge doctor" in proc.stdout
    assert f"helm test {first} -n {namespace}" in proc.stdout

    # The first release's webhook configuration, as Helm labels it (no webhooks: harmless to
    # the other tests' pods).
    mine = find(render(first, namespace), "MutatingWebhookConfiguration")
    config = {"apiVersion": mine["apiVersion"], "kind": mine["kind"], "webhooks": [],
              "metadata": {"name": mine["metadata"]["name"], "labels": mine["metadata"]["labels"],
                           "annotations": {"meta.helm.sh/release-name": first,
                                           "meta.helm.sh/release-namespace": namespace}}}
    applied.append([config])
    kubectl(control_plane, "apply", "--server-side", "--field-manager=slurmbridge-helm-test",
            "-f", "-", stdin=dump([config]))
    proc = _install_dry_run(control_plane, second, "sb-other")
    assert proc.returncode != 0, proc.stdout
    assert f'release "{first}" in namespace "{namespace}"' in proc.stderr, proc.stderr
    assert "One release per cluster" in proc.stderr, proc.stderr
    assert _install_dry_run(control_plane, first, namespace).returncode == 0


def test_doctor_hook_accepted_by_the_api_server(control_plane: ControlPlane, namespace: str,
                                                applied: list[list[Manifest]]) -> None:
    """`helm test` creates the doctor Pod once the release is installed: with the extender's
    service account in place, the API server admits it as rendered."""
    docs = render(release_name(), namespace)
    pod = find(docs, "Pod", "-doctor")
    account = next(d for d in docs if d["kind"] == "ServiceAccount"
                   and d["metadata"]["name"] == pod["spec"]["serviceAccountName"])
    applied.append([account])
    kubectl(control_plane, "apply", "--server-side", "--field-manager=slurmbridge-helm-test",
            "-f", "-", stdin=dump([account]))
    proc = kubectl(control_plane, "apply", "--server-side", "--dry-run=server",
                   "--field-manager=slurmbridge-helm-test", "-f", "-", stdin=dump([pod]),
                   check=False)
    assert proc.returncode == 0, proc.stderr
