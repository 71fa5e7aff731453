"""docs/install.md's RBAC table is the chart's RBAC (issue 44, item 8): every rule and binding
``helm template`` renders is a row of the table, and every row is rendered.  Render only, in
the e2e tier because it needs helm (the unit tier starts before deploy/k8s/build.sh has built
it); what the rules allow on a real API server: tests/e2e/test_helm_chart.py."""

import re

import pytest

from slurmbridge_devkit.helm import Manifest, render
from tests.docs_text import REPO, section, table_rows

pytestmark = pytest.mark.e2e

INSTALL = REPO / "docs" / "install.md"
RELEASE, NAMESPACE = "rel", "relns"
# (service account, scope, what): scope "cluster", "release ns" or a namespace's name; what:
# (api group, resource, verb, restricted to resource names) or the name of a role the chart
# binds but does not define (a built-in one).
Grant = tuple[str, str, tuple[str, str, str, bool] | str]


def _resource(text: str) -> tuple[str, str]:
    """``resource.group/sub`` as kubectl describe names it → (group, resource/sub)."""
    name, _, sub = text.partition("/")
    resource, _, group = name.partition(".")
    return group, resource + (f"/{sub}" if sub else "")


def _documented() -> set[Grant]:
    grants: set[Grant] = set()
    account = ""
    for cells in table_rows(section(INSTALL, "RBAC")):
        account = cells[0].strip("`").replace("<release>", RELEASE) or account
        scope, permissions = cells[1], cells[2]
        roles = re.findall(r"`([^`]+)`", permissions)
        if permissions.startswith(("built-in", "Role ")):
            grants |= {(account, scope, role) for role in roles}
            continue
        resources = ""
        for clause in permissions.split(";"):  # "get, update on ...": the resources before
            resources, verbs = clause.split(":") if ":" in clause else (resources, clause)
            verbs, named, _ = verbs.partition(" on ")
            grants |= {(account, scope, (*_resource(r.strip()), v.strip(), bool(named)))
                       for r in resources.split(",") for v in verbs.split(",")}
    return grants


def _rendered() -> set[Grant]:
    docs = render(RELEASE, NAMESPACE)
    roles: dict[tuple[str, str], Manifest] = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in {"ClusterRole", "Role"}}
    grants: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in {"ClusterRoleBinding", "RoleBinding"}):
        namespace = binding["metadata"].get("namespace")
        scope = "cluster" if namespace is None else (
            "release ns" if namespace == NAMESPACE else namespace)
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], ref["name"]))
        for subject in binding["subjects"]:
            if role is None:
                grants.add((subject["name"], scope, ref["name"]))
                continue
            grants |= {(subject["name"], scope, (group, resource, verb, "resourceNames" in rule))
                       for rule in role["rules"] for group in rule["apiGroups"]
                       for resource in rule["resources"] for verb in rule["verbs"]}
    return grants


def test_install_md_rbac_table_is_the_charts_rbac() -> None:
    documented, rendered = _documented(), _rendered()
    assert len(rendered) > 20, rendered  # the render found the roles and their bindings
    assert not rendered - documented, (
        "the chart grants what docs/install.md's RBAC table does not list (add a row: "
        f"resource.group/sub: verbs): {sorted(rendered - documented, key=str)}")
    assert not documented - rendered, (
        f"docs/install.md's RBAC table lists what the chart does not grant: "
        f"{sorted(documented - rendered, key=str)}")
