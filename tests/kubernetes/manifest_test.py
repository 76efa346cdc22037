#!/usr/bin/env python3
"""The Kubernetes manifests cannot drift from the code.

No cluster runs here. The test renders deploy/kubernetes/base and every
overlay with `kubectl kustomize` (offline) and checks that names, labels,
selectors, ports, probe paths, configuration keys and mounts agree with each
other, with deploy/docker/Dockerfile, and with the daemons themselves: the
rendered configuration passes `--check-config` of the real binaries, a
JobManager and a TaskManager started on it (ports and directories moved to
this machine) answer the probes the manifests use, and every shared library
the binaries load comes from a package the image installs.

Usage: manifest_test.py SOURCE_DIR BIN_DIR
"""
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

SOURCE, BIN = sys.argv[1], sys.argv[2]
KUBE = os.path.join(SOURCE, "deploy", "kubernetes")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def render(directory):
    out = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"manifest_test: kubectl kustomize {directory} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs, kind, name_prefix):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name_prefix)]
    check(len(found) == 1, f"expected one {kind} {name_prefix}*, found {len(found)}")
    return found[0] if found else None


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def substitute_env(arg, env):
    for name, value in env.items():
        arg = arg.replace(f"$({name})", value)
    return arg


def memory_bytes(text):
    """'64 mb', '1 gb' (Weir's sizes) and '512Mi', '1Gi' (Kubernetes quantities) in bytes."""
    units = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}
    text = text.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(float(number) * units.get(text[len(number):] or "b", 1))


def check_pod(where, deployment, config, docs, elected):
    spec = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    check(matches(deployment["spec"]["selector"]["matchLabels"], labels),
          f"{where}: the Deployment's selector does not match its pods' labels")
    pod_security = spec.get("securityContext", {})
    check(pod_security.get("runAsNonRoot") is True, f"{where}: pods must run as non-root")
    check(spec.get("automountServiceAccountToken") is False,
          f"{where}: job code could read the service-account token: set automountServiceAccountToken: false")
    volumes = {v["name"]: v for v in spec["volumes"]}
    (container,) = spec["containers"]
    security = container.get("securityContext", {})
    check(security.get("readOnlyRootFilesystem") is True, f"{where}: the root file system must be read-only")
    check(security.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation must be off")
    check("ALL" in security.get("capabilities", {}).get("drop", []), f"{where}: capabilities must be dropped")
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for m in container["volumeMounts"]:
        check(m["name"] in volumes, f"{where}: volumeMount {m['name']} has no volume")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container.get("args", []) or container.get("command", [])

    # --config points at the ConfigMap's file.
    check("--config" in args, f"{where}: no --config in {args}")
    config_path = args[args.index("--config") + 1] if "--config" in args else ""
    config_dir = os.path.dirname(config_path)
    check(config_dir in mounts and "configMap" in volumes.get(mounts[config_dir]["name"], {}),
          f"{where}: --config {config_path} is not on the ConfigMap's mount")
    if config_dir in mounts:
        cm_name = volumes[mounts[config_dir]["name"]]["configMap"]["name"]
        cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name]
        check(len(cm) == 1 and os.path.basename(config_path) in cm[0]["data"],
              f"{where}: ConfigMap {cm_name} does not hold {os.path.basename(config_path)}")

    # The token file is on the Secret's mount.
    token_dir = os.path.dirname(config.get("security.auth.token-file", ""))
    check(token_dir in mounts and "secret" in volumes.get(mounts[token_dir]["name"], {}),
          f"{where}: security.auth.token-file is not on a Secret's mount")

    # Everything the daemon writes is on a mounted volume, under a writable one.
    def writable(path):
        for mount_path, m in mounts.items():
            if (path == mount_path or path.startswith(mount_path + "/")) and not m.get("readOnly"):
                return volumes[m["name"]]
        return None

    if elected:
        # Nothing durable on a file system: every such directory in the
        # bucket, no claim mounted, and the S3 credentials from a Secret.
        for key in ("high-availability.storageDir", "state.checkpoints.dir", "state.savepoints.dir"):
            check(config[key].startswith("s3://"), f"{where}: {key} ({config[key]}) is not in an object store")
        for v in volumes.values():
            check("persistentVolumeClaim" not in v, f"{where}: volume {v['name']} is a claim; nothing is shared")
        secrets = [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]
        check(secrets and not any(k in config for k in ("s3.access-key", "s3.secret-key")),
              f"{where}: the S3 credentials must come from a Secret (envFrom), not from the ConfigMap")
    for key in ("high-availability.storageDir", "state.checkpoints.dir", "state.savepoints.dir"):
        if elected:
            break
        volume = writable(config[key])
        check(volume is not None and "persistentVolumeClaim" in volume,
              f"{where}: {key} ({config[key]}) is not on the shared volume")
        if volume is not None and "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = [d for d in docs if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == claim]
            check(len(pvc) == 1 and "ReadWriteMany" in pvc[0]["spec"]["accessModes"],
                  f"{where}: claim {claim} missing or not ReadWriteMany")
    for key in ("io.tmp.dirs", "taskmanager.state.local.root-dirs"):
        check(writable(config[key]) is not None, f"{where}: {key} ({config[key]}) is not on a writable volume")

    # Environment variables the arguments use are all defined, and vice versa.
    env = {e["name"]: e for e in container.get("env", [])}
    for arg in args:
        for name in [part.split(")")[0] for part in arg.split("$(")[1:]]:
            check(name in env, f"{where}: argument {arg} uses undefined $({name})")
    return container, ports, args, env


def check_probes(where, container, ports, rest_port):
    check(ports.get("http") == rest_port, f"{where}: container port http {ports.get('http')} != {rest_port}")
    ready = container.get("readinessProbe", {}).get("httpGet", {})
    live = container.get("livenessProbe", {}).get("httpGet", {})
    check(ready.get("path") == "/readyz" and ready.get("port") in ("http", rest_port),
          f"{where}: readiness probe {ready} is not /readyz on the HTTP port")
    check(live.get("path") == "/healthz" and live.get("port") in ("http", rest_port),
          f"{where}: liveness probe {live} is not /healthz on the HTTP port")
    return [ready.get("path"), live.get("path")]


def check_network_policies(where, docs, jm, tm):
    """A TaskManager's RPC port (deployments, data exchange) is open to
    Weir's pods only; the JobManager's ports and HTTP ports to anyone."""
    jm_labels = jm["spec"]["template"]["metadata"]["labels"]
    tm_labels = tm["spec"]["template"]["metadata"]["labels"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]

    def governing(labels):
        return [p for p in policies if matches(p["spec"]["podSelector"].get("matchLabels", {}), labels)]

    for name, labels, deployment in (("JobManager", jm_labels, jm), ("TaskManager", tm_labels, tm)):
        if not check(governing(labels), f"{where}: no NetworkPolicy selects the {name} pods"):
            continue
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        declared = {p["name"] for p in container["ports"]}
        for policy in governing(labels):
            for rule in policy["spec"].get("ingress", []):
                for port in rule.get("ports", []):
                    check(port["port"] in declared,
                          f"{where}: NetworkPolicy {policy['metadata']['name']} names port {port['port']}, "
                          f"which the {name} does not declare")

    def sources(labels, port):
        # None: from anywhere; else the pod label sets allowed.
        allowed = []
        for policy in governing(labels):
            for rule in policy["spec"].get("ingress", []):
                if not any(p["port"] == port for p in rule.get("ports", [])):
                    continue
                if "from" not in rule:
                    return None
                allowed += [f.get("podSelector", {}).get("matchLabels", {}) for f in rule["from"]]
        return allowed

    tm_rpc = sources(tm_labels, "rpc")
    check(tm_rpc is not None and tm_rpc, f"{where}: a TaskManager's RPC port must be open to Weir's pods only")
    if tm_rpc:
        check(any(matches(s, jm_labels) for s in tm_rpc), f"{where}: the JobManager cannot reach TaskManagers' RPC port")
        check(any(matches(s, tm_labels) for s in tm_rpc), f"{where}: TaskManagers cannot exchange data")
        check(all(matches(s, jm_labels) or matches(s, tm_labels) for s in tm_rpc) and all(tm_rpc),
              f"{where}: a TaskManager's RPC port is open beyond Weir's pods: {tm_rpc}")
    for port in ("rpc", "http"):
        check(sources(jm_labels, port) is None, f"{where}: the JobManager's {port} port must take clients from anywhere")
    check(sources(tm_labels, "http") is None, f"{where}: a TaskManager's probes and metrics must stay reachable")


def check_rendering(where, docs, work):
    cm = one(docs, "ConfigMap", "weir-config")
    svc = one(docs, "Service", "weir-jobmanager")
    jm = one(docs, "Deployment", "weir-jobmanager")
    tm = one(docs, "Deployment", "weir-taskmanager")
    pdb = one(docs, "PodDisruptionBudget", "weir-taskmanager")
    if None in (cm, svc, jm, tm, pdb):
        return
    config_text = cm["data"]["weir.yaml"]
    config = {k: str(v) for k, v in yaml.safe_load(config_text).items()}
    # With an election (high-availability.type etcd): standby JobManagers and
    # no shared volume. Without: one JobManager on a ReadWriteMany claim.
    elected = config.get("high-availability.type", "none") == "etcd"

    if elected:
        check(jm["spec"]["replicas"] >= 2, f"{where}: an elected JobManager needs a standby (replicas >= 2)")
        check(not [d for d in docs if d["kind"] == "PersistentVolumeClaim"],
              f"{where}: a claim is left; with an election nothing is shared on a file system")
        jm_args = jm["spec"]["template"]["spec"]["containers"][0]["args"]
        check("-Djobmanager.rpc.address=$(POD_IP)" in jm_args,
              f"{where}: each JobManager must announce its own address (-Djobmanager.rpc.address=$(POD_IP))")
    else:
        one(docs, "PersistentVolumeClaim", "weir-shared")
        check(jm["spec"]["replicas"] == 1, f"{where}: the JobManager must have one replica")
        check(jm["spec"]["strategy"]["type"] == "Recreate", f"{where}: the JobManager must be replaced, not rolled")
    jm_labels = jm["spec"]["template"]["metadata"]["labels"]
    tm_labels = tm["spec"]["template"]["metadata"]["labels"]
    check(matches(svc["spec"]["selector"], jm_labels), f"{where}: the Service does not select the JobManager")
    check(not matches(svc["spec"]["selector"], tm_labels), f"{where}: the Service also selects TaskManagers")
    check(matches(pdb["spec"]["selector"]["matchLabels"], tm_labels) and
          not matches(pdb["spec"]["selector"]["matchLabels"], jm_labels),
          f"{where}: the PodDisruptionBudget must select the TaskManagers only")
    check(config["jobmanager.rpc.address"] == svc["metadata"]["name"],
          f"{where}: jobmanager.rpc.address is not the Service's name")

    check_network_policies(where, docs, jm, tm)

    # What gRPC may hold for each daemon's endpoint fits in half its pod's
    # memory limit, so a flood that fills the quota does not get the pod
    # killed for memory.
    for name, deployment, key in (("JobManager", jm, "jobmanager.rpc.memory-quota"),
                                  ("TaskManager", tm, "taskmanager.rpc.memory-quota")):
        limit = deployment["spec"]["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
        check(key in config, f"{where}: {key} is not set; size it to the {name}'s pod")
        if key in config and "memory" in limit:
            check(memory_bytes(config[key]) * 2 <= memory_bytes(limit["memory"]),
                  f"{where}: {key} {config[key]} is more than half the {name}'s memory limit {limit['memory']}")

    jm_container, jm_ports, jm_args, jm_env = check_pod(f"{where} JobManager", jm, config, docs, elected)
    tm_container, tm_ports, tm_args, tm_env = check_pod(f"{where} TaskManager", tm, config, docs, elected)
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    rpc_port, rest_port = int(config["jobmanager.rpc.port"]), int(config["rest.port"])
    check(svc_ports.get("rpc", {}).get("port") == rpc_port, f"{where}: Service rpc port != jobmanager.rpc.port")
    check(svc_ports.get("http", {}).get("port") == rest_port, f"{where}: Service http port != rest.port")
    for name, port in svc_ports.items():
        check(jm_ports.get(port["targetPort"]) == port["port"] if isinstance(port["targetPort"], str) else True,
              f"{where}: Service port {name} targets {port['targetPort']}, not the container's {name} port")
    check(jm_ports.get("rpc") == rpc_port, f"{where}: JobManager container port rpc != jobmanager.rpc.port")
    check(tm_ports.get("rpc") == int(config["taskmanager.rpc.port"]),
          f"{where}: TaskManager container port rpc != taskmanager.rpc.port")
    jm_probes = check_probes(f"{where} JobManager", jm_container, jm_ports, rest_port)
    tm_probes = check_probes(f"{where} TaskManager", tm_container, tm_ports, int(config["taskmanager.rest.port"]))

    # The default (3 min) when the configuration does not set it.
    value, unit = config.get("task.cancellation.timeout", "3 min").split()
    cancel = int(value) * {"ms": 0.001, "s": 1, "min": 60, "h": 3600}[unit]
    check(tm["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > cancel,
          f"{where}: terminationGracePeriodSeconds leaves no room for task.cancellation.timeout")

    # The image: binaries where the manifests run them, the same user.
    dockerfile = open(os.path.join(SOURCE, "deploy", "docker", "Dockerfile")).read()
    for args in (jm_args, tm_args):
        check(args[0] in dockerfile, f"{where}: {args[0]} is not in the image (deploy/docker/Dockerfile)")
    uid = str(jm["spec"]["template"]["spec"]["securityContext"]["runAsUser"])
    check(f"USER {uid}" in dockerfile and f"--uid {uid}" in dockerfile,
          f"{where}: the image's user is not {uid}")

    # The daemons accept the configuration as the pods give it to them.
    config_file = os.path.join(work, f"{where.replace(' ', '_')}.yaml")
    with open(config_file, "w") as f:
        f.write(config_text)
    env = {"POD_IP": "10.0.0.7", "POD_NAME": "weir-taskmanager-0"}
    for e in list(tm_env.values()) + list(jm_env.values()):
        if "value" in e:
            env[e["name"]] = e["value"]
    for args in (jm_args, tm_args):
        argv = [os.path.join(BIN, os.path.basename(args[0])), "--check-config"]
        argv += [config_file if a.startswith("/etc/weir/") and a.endswith(".yaml") else substitute_env(a, env)
                 for a in args[1:]]
        out = subprocess.run(argv, capture_output=True, text=True)
        check(out.returncode == 0, f"{where}: {' '.join(argv)} refused the configuration: {out.stderr.strip()}")

    # Started on it (ports and directories moved here), they serve the
    # probes the manifests use.
    jm_rest, tm_rest, jm_rpc = free_port(), free_port(), free_port()
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write("manifest-test-secret\n")
    os.chmod(token, 0o600)
    moved = [f"-Drest.port={jm_rest}", f"-Djobmanager.rpc.port={jm_rpc}", "-Djobmanager.rpc.address=127.0.0.1",
             f"-Dsecurity.auth.token-file={token}", f"-Dhigh-availability.storageDir={work}/ha",
             f"-Dstate.checkpoints.dir={work}/checkpoints", f"-Dstate.savepoints.dir={work}/savepoints",
             f"-Dio.tmp.dirs={work}/local", f"-Dtaskmanager.state.local.root-dirs={work}/local/state"]
    if elected:
        # The election on the test's etcd server, in a cluster of its own.
        etcd_dir = os.environ.get("WEIR_TEST_ETCD_DIR")
        check(etcd_dir is not None, f"{where}: WEIR_TEST_ETCD_DIR is not set; run through ctest (fixture etcd)")
        if etcd_dir is None:
            return
        endpoint = open(os.path.join(etcd_dir, "address")).read().strip()
        moved += [f"-Dhigh-availability.etcd.endpoints={endpoint}",
                  f"-Dhigh-availability.cluster-id=manifest-test-{os.getpid()}-{where.replace(' ', '-')}"]
    logs = [open(os.path.join(work, f"{where}-{n}.log".replace(" ", "_")), "w") for n in ("jm", "tm")]
    procs = [subprocess.Popen([os.path.join(BIN, "weir-jobmanager"), "--config", config_file] + moved,
                              stdout=logs[0], stderr=subprocess.STDOUT)]
    tm_argv = [os.path.join(BIN, "weir-taskmanager"), "--config", config_file] + \
              [substitute_env(a, dict(env, POD_IP="127.0.0.1")) for a in tm_args[3:]] + moved + \
              [f"-Dtaskmanager.rest.port={tm_rest}", "-Dtaskmanager.rpc.port=0"]
    procs.append(subprocess.Popen(tm_argv, stdout=logs[1], stderr=subprocess.STDOUT))
    try:
        deadline = time.time() + 30
        want = {(jm_rest, p) for p in jm_probes} | {(tm_rest, p) for p in tm_probes}
        while want and time.time() < deadline:
            want = {(port, path) for port, path in want if http_status(port, path) != 200}
            time.sleep(0.2)
        check(not want, f"{where}: probes not answering 200: {sorted(want)}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for log in logs:
            log.close()


def package_closure(packages):
    """The installed packages `packages` depend on, recursively (dpkg's own
    records: works offline), themselves included."""
    seen, todo = set(), list(packages)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        out = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", name],
                             capture_output=True, text=True)
        if out.returncode != 0:
            continue  # an alternative that is not installed
        seen.add(name)
        for dependency in out.stdout.split(","):
            for alternative in dependency.split("|"):
                dep = alternative.strip().split(" ")[0].split(":")[0]
                if dep:
                    todo.append(dep)
    return seen


def owning_package(path):
    """The Debian package that ships `path`, or None (merged /usr: try both)."""
    candidates = [path]
    if path.startswith("/usr/"):
        candidates.append(path[len("/usr"):])
    else:
        candidates.append("/usr" + path)
    for candidate in candidates:
        out = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":")[0].strip()
    return None


def check_image_libraries():
    """Every shared library the binaries load comes from a package the
    image's runtime stage installs (or from the base image)."""
    dockerfile = open(os.path.join(SOURCE, "deploy", "docker", "Dockerfile")).read()
    runtime = dockerfile[dockerfile.rindex("\nFROM "):]
    install = runtime[runtime.index("apt-get install"):]
    install = install[:install.index("&&")]
    packages = [w for w in install.replace("\\", " ").split()[2:] if not w.startswith("-")]
    check(len(packages) > 5, f"Dockerfile: cannot read the runtime stage's packages: {packages}")
    essential = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Essential}\n"], capture_output=True,
                               text=True).stdout.split("\n")
    base = [line.split()[0] for line in essential if line.endswith(" yes")] + ["apt"]
    available = package_closure(packages + base)
    for binary in ("weir", "weir-jobmanager", "weir-taskmanager"):
        out = subprocess.run(["ldd", os.path.join(BIN, binary)], capture_output=True, text=True)
        check(out.returncode == 0, f"ldd {binary} failed: {out.stderr.strip()}")
        for line in out.stdout.splitlines():
            if "=>" not in line or "/" not in line.split("=>")[1]:
                continue
            library = line.split("=>")[1].split("(")[0].strip()
            package = owning_package(library)
            check(package is not None and package in available,
                  f"{binary} loads {library} (package {package}), which the image does not install: add it to "
                  f"the runtime stage of deploy/docker/Dockerfile")
    print(f"manifest_test: image: the binaries' shared libraries come from {len(packages)} packages "
          f"of its runtime stage and the base image")


def main():
    if shutil.which("kubectl") is None:
        sys.exit("manifest_test: kubectl is missing (Debian: kubernetes-client; scripts/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="weir-manifest-test-")
    try:
        targets = [("base", os.path.join(KUBE, "base"))]
        overlays = os.path.join(KUBE, "overlays")
        targets += [(f"overlay {o}", os.path.join(overlays, o)) for o in sorted(os.listdir(overlays))]
        for where, directory in targets:
            docs = render(directory)
            before = len(failures)
            check_rendering(where, docs, work)
            print(f"manifest_test: {where}: {len(docs)} objects, "
                  f"{'consistent' if len(failures) == before else 'INCONSISTENT'}")
        # The production overlay sets replicas and slots in one place.
        prod = render(os.path.join(overlays, "production"))
        tm = [d for d in prod if d["kind"] == "Deployment" and d["metadata"]["name"] == "weir-taskmanager"][0]
        slots = [e["value"] for e in tm["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "TASK_SLOTS"]
        check(tm["spec"]["replicas"] == 4 and slots == ["2"], "overlay production: not 4 TaskManagers of 2 slots")
        check_image_libraries()
    finally:
        if failures:
            for name in sorted(os.listdir(work)):
                if name.endswith(".log"):
                    print(f"--- {name}\n" + open(os.path.join(work, name)).read()[-2000:])
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("manifest_test: FAIL\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("manifest_test: PASS")


main()
