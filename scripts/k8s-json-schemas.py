#!/usr/bin/env python3
"""Kubernetes JSON schemas for kubeconform, made offline (make tools).

    scripts/k8s-json-schemas.py GO KUBECONFORM_VERSION KUBERNETES_VERSION OUT

Writes OUT/vKUBERNETES_VERSION-standalone-strict/<kind><suffix>.json, one
file per kind of the Kubernetes API (deployment-apps-v1.json, service-v1.json,
networkpolicy-networking-v1.json ...): the layout kubeconform's
-schema-location template
'OUT/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json'
expects, and the flavour of github.com/yannh/kubernetes-json-schema that
kubeconform -strict downloads by default ("standalone": no $ref left;
"strict": additionalProperties false on every object with properties).

Both inputs come from the Go module proxy, the machine needs no other
network: the API's OpenAPI v2 document is api/openapi-spec/swagger.json of
the module zip k8s.io/kubernetes@vKUBERNETES_VERSION, and the converter is
scripts/openapi2jsonschema.py of the module
github.com/yannh/kubeconform@KUBECONFORM_VERSION, imported from the module
cache (not copied). That converter reads CustomResourceDefinitions, not
swagger.json, so this script does the Kubernetes-specific part the schemas
of yannh/kubernetes-json-schema get from openapi2jsonschema --kubernetes
--expanded --stand-alone --strict (one schema per group/version/kind, $refs
inlined, IntOrString a string or an integer, Quantity a string or a number,
apiVersion and kind limited to the kind's values), and hands each schema to
the converter's own functions for the rest: allow_null_optional_fields
(optional fields may be null), then write_schema_file with
DENY_ROOT_ADDITIONAL_PROPERTIES set (additionalProperties false on every
object with properties, the root included; int-or-string formats).

A recursive reference (only JSONSchemaProps, inside CustomResourceDefinition)
is left open ({}) where it recurses. The directory is written next to OUT and
renamed into place when complete, so an interrupted run leaves nothing
half-made behind.
"""

import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


def module_download(go, path, version, cwd):
    """go mod download -json path@version, outside any module; returns its JSON."""
    out = subprocess.run([go, "mod", "download", "-json", f"{path}@{version}"],
                         cwd=cwd, check=False, capture_output=True, text=True)
    info = json.loads(out.stdout) if out.stdout.strip() else {}
    if out.returncode != 0 or info.get("Error"):
        sys.exit(f"go mod download {path}@{version}: {info.get('Error') or out.stderr.strip()}")
    return info


def load_converter(kubeconform_dir):
    path = os.path.join(kubeconform_dir, "scripts", "openapi2jsonschema.py")
    spec = importlib.util.spec_from_file_location("openapi2jsonschema", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # its main is guarded by __name__
    for fn in ("allow_null_optional_fields", "write_schema_file"):
        if not hasattr(mod, fn):
            sys.exit(f"{path}: no {fn}: the converter changed, check this script")
    return mod


def kind_suffix(group, version):
    """kubeconform's KindSuffix: -<first label of the group>-<version>, -<version> for the core group."""
    return (f"-{group.split('.')[0].lower()}" if group else "") + f"-{version.lower()}"


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.split("\n\n")[1])
    go, kc_version, k8s_version, out = sys.argv[1:]
    k8s_version = k8s_version.lstrip("v")
    os.makedirs(out, exist_ok=True)
    final = os.path.join(out, f"v{k8s_version}-standalone-strict")

    kc = module_download(go, "github.com/yannh/kubeconform", kc_version, out)
    k8s = module_download(go, "k8s.io/kubernetes", f"v{k8s_version}", out)
    converter = load_converter(kc["Dir"])
    with zipfile.ZipFile(k8s["Zip"]) as z:
        swagger = json.loads(z.read(f"k8s.io/kubernetes@v{k8s_version}/api/openapi-spec/swagger.json"))
    defs = swagger["definitions"]

    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"oneOf": [{"type": "string"}, {"type": "number"}]}

    def inline(node, stack):
        """node with every #/definitions/ $ref replaced by a copy of its target."""
        if isinstance(node, list):
            return [inline(x, stack) for x in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            name = ref[len("#/definitions/"):]
            if name in stack:
                return {}
            target = inline(defs[name], stack | {name})
            rest = {k: inline(v, stack) for k, v in node.items() if k != "$ref"}
            return {**target, **rest} if rest else target
        return {k: inline(v, stack) for k, v in node.items()}

    tmp = tempfile.mkdtemp(prefix=f".v{k8s_version}-", dir=out)
    written = 0
    try:
        cwd = os.getcwd()
        os.chdir(tmp)
        os.environ["DENY_ROOT_ADDITIONAL_PROPERTIES"] = "1"
        try:
            for name in sorted(defs):
                gvks = defs[name].get("x-kubernetes-group-version-kind") or []
                for gvk in gvks:
                    group, version, kind = gvk.get("group", ""), gvk["version"], gvk["kind"]
                    schema = inline(defs[name], frozenset([name]))
                    props = schema.get("properties", {})
                    if "apiVersion" in props:
                        props["apiVersion"] = {**props["apiVersion"], "enum": [f"{group}/{version}" if group else version]}
                    if "kind" in props:
                        props["kind"] = {**props["kind"], "enum": [kind]}
                    schema.setdefault("type", "object")
                    schema["$schema"] = "http://json-schema.org/schema#"
                    if "properties" in schema:
                        schema["properties"] = converter.allow_null_optional_fields(schema["properties"])
                    filename = f"{kind.lower()}{kind_suffix(group, version)}.json"
                    with contextlib.redirect_stdout(io.StringIO()):  # a line per file
                        converter.write_schema_file(schema, filename)
                    written += 1
        finally:
            os.chdir(cwd)
        for must in ("deployment-apps-v1.json", "service-v1.json", "configmap-v1.json"):
            if not os.path.exists(os.path.join(tmp, must)):
                sys.exit(f"{final}: no {must} made from swagger.json: check this script")
        with open(os.path.join(tmp, ".complete"), "w") as f:
            print(f"{written} schemas from k8s.io/kubernetes@v{k8s_version} api/openapi-spec/swagger.json, "
                  f"converter github.com/yannh/kubeconform@{kc_version} scripts/openapi2jsonschema.py", file=f)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    print(f"{final}: {written} schemas")


if __name__ == "__main__":
    main()
