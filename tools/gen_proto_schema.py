#!/usr/bin/env python3
"""Generate src/cluster/proto_schema.json: the protobuf schema table the local
cluster's protobuf decoder (src/cluster/proto.rs) reads.

Sources (nothing is written by hand):
  * the message structure (field number, scalar/message type, repeated, map)
    comes from kube-rs's prost-generated `k8s-pb` crate;
  * for each field, the JSON name and the Go shape the API server's JSON
    depends on (pointer or not, `omitempty`/`omitzero`, inlined embedded
    struct) come from the Go struct tags of the published API types
    (k8s.io/api and k8s.io/apimachinery), matched by protobuf field number:
    the same tags k8s-openapi's JSON names are generated from. The generator
    cross-checks the JSON names against k8s-openapi's serializers and
    fails on a disagreement.

Rerun (from the repository root):
    python3 tools/gen_proto_schema.py \
        --k8s-pb ~/.cargo/registry/src/*/k8s-pb-0.9.0 \
        --k8s-openapi ~/.cargo/registry/src/*/k8s-openapi-0.29.0 \
        --api <git dir or checkout of github.com/kubernetes/api> \
        --apimachinery <git dir or checkout of github.com/kubernetes/apimachinery> \
        > src/cluster/proto_schema.json
(--api/--apimachinery accept a bare git directory: files are read at HEAD.)

Output: {"messages": {"<k8s-pb module path>.<Message>": [[tag, json, type, ref, flags], ...]}}
  type: string int32 int64 uint32 uint64 bool bytes double float message
        map:<key>:<value>   (value "message" takes ref)
  ref:  the message type's full name, or ""
  flags: r repeated, p Go pointer (present means set, zero included),
         o omitempty, z omitzero, i inlined into the parent object (json "")
"""
import argparse
import json
import os
import re
import subprocess
import sys

FIELD_ATTR = re.compile(r'#\[prost\(([^\]]*)\)\]')
STRUCT = re.compile(r'^pub struct (\w+) \{')
FIELD = re.compile(r'^\s*pub (?:r#)?(\w+): (.*),$')


def rust_modules(root):
    for dirpath, _dirs, files in os.walk(os.path.join(root, "src")):
        if "mod.rs" in files:
            rel = os.path.relpath(dirpath, os.path.join(root, "src"))
            if rel == ".":
                continue
            yield rel.replace(os.sep, "."), os.path.join(dirpath, "mod.rs")


def resolve(module, ty):
    ty = ty.strip().rstrip(",").strip()
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        if ty.startswith(wrapper):
            return resolve(module, ty[len(wrapper):-1])
    parts = module.split(".")
    segs = ty.split("::")
    while segs and segs[0] == "super":
        parts.pop()
        segs.pop(0)
    return ".".join(parts + segs)


def parse_pb(root):
    messages = {}
    for module, path in rust_modules(root):
        lines = open(path).read().splitlines()
        cur = None
        attr = None
        pending = ""
        for line in lines:
            # prost wraps long field types over several lines: join them.
            if pending or (cur is not None and attr is not None and line.strip().startswith("pub ")):
                pending += " " + line.strip() if pending else line
                if pending.count("<") > pending.count(">") or not pending.endswith(","):
                    continue
                line, pending = pending.replace("< ", "<").replace(" >", ">").replace(", >", ">"), ""
            m = STRUCT.match(line)
            if m:
                cur = module + "." + m.group(1)
                messages[cur] = []
                continue
            if line.startswith("}"):
                cur = None
                continue
            if cur is None:
                continue
            m = FIELD_ATTR.search(line)
            if m:
                attr = m.group(1)
                continue
            m = FIELD.match(line)
            if m and attr is not None:
                name, ty = m.group(1), m.group(2)
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                repeated = "repeated" in attr.split(", ")
                mm = re.match(r'btree_map = "(\w+), (\w+)"', attr)
                ref = ""
                if mm:
                    kind = "map:%s:%s" % (mm.group(1), mm.group(2))
                    if mm.group(2) == "message":
                        inner = ty[ty.index(",") + 1:ty.rindex(">")].strip().rstrip(",")
                        ref = resolve(module, inner)
                else:
                    kind = re.match(r'(\w+)', attr).group(1)
                    if kind == "message":
                        ref = resolve(module, ty)
                messages[cur].append({"tag": tag, "rust": name, "kind": kind, "ref": ref, "repeated": repeated})
                attr = None
    return messages


GO_STRUCT = re.compile(r'^type (\w+) struct \{')
GO_FIELD = re.compile(r'^\s*(?:([A-Z]\w*)\s+)?(\S+)\s+`([^`]*)`')


def go_files(src, subdir):
    """(name, text) of the non-test .go files directly in subdir of a checkout or bare git dir."""
    if os.path.isdir(os.path.join(src, subdir)):
        d = os.path.join(src, subdir)
        for f in sorted(os.listdir(d)):
            if f.endswith(".go") and not f.endswith("_test.go"):
                yield f, open(os.path.join(d, f)).read()
        return
    try:
        out = subprocess.run(["git", "--git-dir", src, "ls-tree", "--name-only", "HEAD", subdir + "/"],
                             capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError:
        return
    for f in out.split():
        if f.endswith(".go") and not f.endswith("_test.go"):
            text = subprocess.run(["git", "--git-dir", src, "show", "HEAD:" + f], capture_output=True, text=True, check=True).stdout
            yield f, text


def parse_go(src, subdir):
    """struct -> tag -> (json name, pointer, omitempty, omitzero, inline)"""
    structs = {}
    for _f, text in go_files(src, subdir):
        cur = None
        for line in text.splitlines():
            m = GO_STRUCT.match(line)
            if m:
                # prost renames acronyms (HTTPGetAction -> HttpGetAction): match case-insensitively
                cur = structs.setdefault(m.group(1).lower(), {})
                continue
            if line.startswith("}"):
                cur = None
                continue
            if cur is None:
                continue
            m = GO_FIELD.match(line)
            if not m:
                continue
            fname, gotype, tags = m.groups()
            pm = re.search(r'protobuf:"([^"]*)"', tags)
            if not pm:
                continue
            pparts = pm.group(1).split(",")
            if len(pparts) < 2 or not pparts[1].isdigit():
                continue
            jm = re.search(r'json:"([^"]*)"', tags)
            jparts = (jm.group(1) if jm else "").split(",")
            jname = jparts[0]
            inline = jname == "" or "inline" in jparts[1:]
            if jname == "-":
                continue
            cur[int(pparts[1])] = {
                "json": "" if inline else jname,
                "pointer": gotype.startswith("*"),
                "omitempty": "omitempty" in jparts[1:],
                "omitzero": "omitzero" in jparts[1:],
                "inline": inline,
            }
    return structs


def go_source(module, api, apimachinery):
    parts = module.split(".")
    if parts[0] == "api" and api:
        return api, "/".join(parts[1:])
    if parts[0] == "apimachinery" and apimachinery:
        return apimachinery, "/".join(parts[1:])
    return None, None


def openapi_names(root):
    """k8s-openapi: (module path under src/v1_37, struct) -> {json names}."""
    base = os.path.join(root, "src", "v1_37")
    names = {}
    for dirpath, _dirs, files in os.walk(base):
        rel = os.path.relpath(dirpath, base).replace(os.sep, ".")
        for f in files:
            if not f.endswith(".rs") or f == "mod.rs":
                continue
            text = open(os.path.join(dirpath, f)).read()
            for sm in re.finditer(r'^pub struct (\w+) \{', text, re.M):
                got = set(re.findall(r'"(\w+)" => Field::Key_', text))
                names.setdefault(rel, {})[sm.group(1).lower()] = got
    return names


def lower_camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s-pb", required=True)
    ap.add_argument("--k8s-openapi")
    ap.add_argument("--api")
    ap.add_argument("--apimachinery")
    a = ap.parse_args()
    pb = parse_pb(a.k8s_pb)
    oa = openapi_names(a.k8s_openapi) if a.k8s_openapi else {}
    go_cache = {}
    missing = {}
    out = {}
    stats = {"fields": 0, "no_go": 0, "openapi_checked": 0}
    for full in sorted(pb):
        module, msg = full.rsplit(".", 1)
        if module.startswith("metrics") or module.startswith("kube_aggregator"):
            continue
        src, sub = go_source(module, a.api, a.apimachinery)
        if src is not None and (src, sub) not in go_cache:
            go_cache[(src, sub)] = parse_go(src, sub)
        go = go_cache.get((src, sub), {}).get(msg.lower(), {})
        oa_names = oa.get(module, {}).get(msg.lower())
        rows = []
        for f in pb[full]:
            stats["fields"] += 1
            g = go.get(f["tag"])
            if g is None:
                stats["no_go"] += 1
                missing.setdefault(module, 0)
                missing[module] += 1
                g = {"json": lower_camel(f["rust"]), "pointer": False, "omitempty": True, "omitzero": False, "inline": False}
                if oa_names:
                    for n in oa_names:
                        if n.lower() == f["rust"].replace("_", "").lower():
                            g["json"] = n
            elif oa_names and not g["inline"]:
                stats["openapi_checked"] += 1
                if g["json"] not in oa_names:
                    print("json name %s of %s field %d is not in k8s-openapi's %s" % (g["json"], full, f["tag"], sorted(oa_names)), file=sys.stderr)
            flags = ("r" if f["repeated"] else "") + ("p" if g["pointer"] else "") + ("o" if g["omitempty"] else "") \
                + ("z" if g["omitzero"] else "") + ("i" if g["inline"] else "")
            rows.append([f["tag"], g["json"], f["kind"], f["ref"], flags])
        out[full] = rows
    print(json.dumps(stats), file=sys.stderr)
    print("fields with no Go struct tag (lowerCamel names, zero values dropped): %s" % json.dumps(missing), file=sys.stderr)
    json.dump({"messages": out}, sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
