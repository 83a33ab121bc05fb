#!/usr/bin/env bash
# The project's container images, built from Debian packages and the project's own files --
# no image registry needed (`make images`):
#
#   dlsroute-base:<hash>    Debian bookworm (minbase) + python3, python3-venv,
#                           openjdk-17-jre-headless, made by mmdebstrap (debootstrap if
#                           mmdebstrap is missing) from the Debian mirror that this machine's
#                           apt sources name, then `docker import`
#   dlsroute-kafka:<hash>   base + the Kafka jars of docker/kafka/pom.xml (kafka.sh fetch)
#                           + docker/image/kafka-entry.sh (apache/kafka's KAFKA_* environment)
#   dlsroute-node:<hash>    base + the project's wheel and its dependencies (PyPI) in
#                           /opt/dlsroute (pyspark left out: see below), docker/examples in
#                           /app/examples, the compiled kernels' cache; entry point `dlsroute`
#
# <hash> is a content hash of each image's inputs: an image whose tag exists is not built
# again. Each is also tagged :local (the last one built).
#
#   bash docker/images.sh build     # build what is missing (the default)
#   bash docker/images.sh env       # DLS_KAFKA_IMAGE=... and DLS_NODE_IMAGE=... lines
#   bash docker/images.sh status    # exit 0 when every image of the current inputs exists
#
# Environment: DOCKER (default docker); DLS_CACHE (default <repo>/.cache; the base's root
# file system is kept as $DLS_CACHE/images/base-<hash>.tar); DLS_DEBIAN_MIRROR (overrides
# the mirror read from /etc/apt/sources.list{,.d/*}; DLS_APT_SOURCES: other files to read);
# PYTHON (default <repo>/.venv/bin/python: builds the wheel and downloads the node's
# dependencies with this machine's pip settings, for the image's CPython 3.11).
#
# The node image leaves out pyspark (a 450 MB wheel): it serves `dlsroute node` and the SDK
# commands; the Spark mapping job (`dlsroute spark-map`) needs a full install.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
DOCKER="${DOCKER:-docker}"
CACHE="${DLS_CACHE:-$REPO/.cache}/images"
PY="${PYTHON:-$REPO/.venv/bin/python}"
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,openjdk-17-jre-headless
# Bump a recipe when what its build does changes without a change of the hashed inputs.
BASE_RECIPE="base-1 $SUITE minbase $BASE_PACKAGES no-docs"
KAFKA_RECIPE="kafka-1"
NODE_RECIPE="node-1 no-pyspark warm-kernels"
NODE_LEFT_OUT=pyspark

log() { printf '[images.sh] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
sha() { sha256sum | cut -c1-16; }

# ---------------------------------------------------------------- inputs and tags
# The Debian mirror of the machine's apt sources: the first "deb" source of $SUITE with the
# main component (deb822 .sources files or one-line lists); never written into the repo.
debian_mirror() {
    if [[ -n "${DLS_DEBIAN_MIRROR:-}" ]]; then echo "$DLS_DEBIAN_MIRROR"; return; fi
    local sources
    # shellcheck disable=SC2206  # a list of paths (tests give their own)
    sources=(${DLS_APT_SOURCES:-/etc/apt/sources.list /etc/apt/sources.list.d/*})
    python3 - "$SUITE" "${sources[@]}" <<'PY'
import re
import sys

suite, files = sys.argv[1], sys.argv[2:]
for path in files:
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        continue
    if path.endswith(".sources"):
        for block in re.split(r"\n\s*\n", text):
            f = {}
            for line in block.splitlines():
                m = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
                if m:
                    f[m.group(1).lower()] = m.group(2).split()
            if ("deb" in f.get("types", []) and suite in f.get("suites", [])
                    and "main" in f.get("components", []) and f.get("uris")):
                print(f["uris"][0])
                sys.exit(0)
    else:
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(words) >= 4 and words[0] == "deb" and words[2] == suite and "main" in words[3:]:
                print(words[1])
                sys.exit(0)
sys.exit("no deb source of " + suite + " with main in the apt sources")
PY
}

# Files whose content makes the node image: the packages the wheel is built from, the
# project metadata and the examples (tracked files and new ones git does not ignore).
NODE_INPUTS=(dls broker_node connectors spark dlsroute schemas pyproject.toml README.md docker/examples)
node_files() {
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$REPO" && git ls-files -co --exclude-standard -- "${NODE_INPUTS[@]}" | LC_ALL=C sort)
    else  # not a git checkout: every file but caches
        (cd "$REPO" && find "${NODE_INPUTS[@]}" -type f ! -path '*/__pycache__/*' \
            ! -name '*.pyc' | LC_ALL=C sort)
    fi
}
node_sources() { (cd "$REPO" && node_files | xargs -d '\n' sha256sum); }

base_tag() { echo "dlsroute-base:$(echo "$BASE_RECIPE" | sha)"; }
kafka_tag() {
    { echo "$KAFKA_RECIPE $(base_tag)"
      cat "$HERE/kafka/pom.xml" "$HERE/image/kafka-entry.sh" "$HERE/image/kafka-log4j2.properties"
    } | sha | sed 's/^/dlsroute-kafka:/'
}
node_tag() {
    { echo "$NODE_RECIPE $(base_tag)"; node_sources; } | sha | sed 's/^/dlsroute-node:/'
}

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------- base
build_base() {
    local tag tar t0=$SECONDS
    tag="$(base_tag)"
    if have_image "$tag"; then log "$tag exists"; return; fi
    mkdir -p "$CACHE"
    tar="$CACHE/base-${tag#*:}.tar"
    if [[ ! -s "$tar" ]]; then
        local mirror
        mirror="$(debian_mirror)"
        [[ "$(id -u)" == 0 ]] || die "the base image's root file system needs root (mmdebstrap/debootstrap)"
        rm -rf "$CACHE"/base-*.tar   # one root file system kept: the current one
        if command -v mmdebstrap >/dev/null; then
            log "mmdebstrap $SUITE ($BASE_PACKAGES) from $mirror"
            # No docs, manuals or translations; apt's lists dropped (the image never runs apt).
            mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
                --dpkgopt='path-exclude=/usr/share/doc/*' \
                --dpkgopt='path-include=/usr/share/doc/*/copyright' \
                --dpkgopt='path-exclude=/usr/share/man/*' \
                --dpkgopt='path-exclude=/usr/share/locale/*' \
                --setup-hook='mkdir -p "$1/usr/share/man/man1"' \
                --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
                "$SUITE" "$tar.part.tar" "$mirror" >&2
        else
            command -v debootstrap >/dev/null || die "neither mmdebstrap nor debootstrap is installed (apt-get install mmdebstrap)"
            log "debootstrap $SUITE ($BASE_PACKAGES) from $mirror"
            local dir="$CACHE/rootfs.$$"
            rm -rf "$dir"
            debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$dir" "$mirror" >&2
            rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
                "$dir"/usr/share/doc "$dir"/usr/share/man "$dir"/usr/share/locale
            tar -C "$dir" -cf "$tar.part.tar" .
            rm -rf "$dir"
        fi
        mv "$tar.part.tar" "$tar"
    fi
    "$DOCKER" import -c 'ENV LANG=C.UTF-8' "$tar" "$tag" >/dev/null
    log "$tag built in $((SECONDS - t0)) s"
}

# A container of the base that runs nothing, for `docker cp` and `docker commit`.
commit_image() {  # $1 = container, $2 = tag, then --change options
    local cid="$1" tag="$2"
    shift 2
    "$DOCKER" commit "$@" "$cid" "$tag" >/dev/null
    "$DOCKER" rm -f "$cid" >/dev/null
    "$DOCKER" tag "$tag" "${tag%%:*}:local"
    # The same image of older inputs goes (its layers stay while another image uses them).
    local old
    for old in $("$DOCKER" images "${tag%%:*}" --format '{{.Repository}}:{{.Tag}}'); do
        [[ "$old" == "$tag" || "$old" == "${tag%%:*}:local" ]] || "$DOCKER" rmi "$old" >/dev/null || true
    done
}

# ---------------------------------------------------------------- kafka
build_kafka() {
    local tag stage cid t0=$SECONDS
    tag="$(kafka_tag)"
    if have_image "$tag"; then log "$tag exists"; "$DOCKER" tag "$tag" "${tag%%:*}:local"; return; fi
    PYTHON="$PY" bash "$HERE/kafka/kafka.sh" fetch
    stage="$CACHE/kafka-stage"
    rm -rf "$stage"
    mkdir -p "$stage/kafka/libs"
    cp "${DLS_CACHE:-$REPO/.cache}"/kafka/kafka-libs/*.jar "$stage/kafka/libs/"
    install -m 0755 "$HERE/image/kafka-entry.sh" "$stage/kafka/entry.sh"
    cp "$HERE/image/kafka-log4j2.properties" "$stage/kafka/log4j2.properties"
    cid="$("$DOCKER" create --network none "$(base_tag)" true)"
    "$DOCKER" cp "$stage/kafka" "$cid:/opt/"
    commit_image "$cid" "$tag" -c 'ENTRYPOINT ["/opt/kafka/entry.sh"]' -c 'CMD []' \
        -c 'WORKDIR /opt/kafka' -c "LABEL org.dlsroute.image=kafka"
    rm -rf "$stage"
    log "$tag built in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- node
node_requirements() {
    "$PY" - "$REPO/pyproject.toml" "$NODE_LEFT_OUT" <<'PY'
import re
import sys
import tomllib

deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
left_out = set(sys.argv[2].split(","))
for dep in deps:
    if re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0].lower() not in left_out:
        print(dep)
PY
}

build_node() {
    local tag stage cid t0=$SECONDS
    tag="$(node_tag)"
    if have_image "$tag"; then log "$tag exists"; "$DOCKER" tag "$tag" "${tag%%:*}:local"; return; fi
    [[ -x "$PY" ]] || die "$PY not found: run \`make setup\` first (it builds the wheel)"
    stage="$CACHE/node-stage"
    rm -rf "$stage"
    mkdir -p "$stage/wheels"
    # The wheel of exactly the hashed files, built from a copy (never in the checkout, where
    # a test may be building its own).
    mkdir -p "$stage/src"
    (cd "$REPO" && node_files | xargs -d '\n' cp --parents -t "$stage/src")
    "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$stage/wheels" "$stage/src" >&2
    node_requirements >"$stage/requirements.txt"
    cp -r "$HERE/examples" "$stage/examples"
    log "node: wheel built ($((SECONDS - t0)) s)"
    # Downloaded here, by this machine's pip (its index, certificates and cache), for the
    # image's Python (CPython 3.11, glibc 2.36, x86_64); installed in the image offline.
    local platforms=() v
    for v in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${v}_x86_64"); done
    platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64
                --platform manylinux1_x86_64)
    "$PY" -m pip download --quiet --disable-pip-version-check --dest "$stage/wheels" \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        "${platforms[@]}" -r "$stage/requirements.txt" >&2
    log "node: dependencies downloaded ($((SECONDS - t0)) s)"
    cid="dlsroute-node-build-$$"
    # The kernels are compiled once here and their cache kept in the image (numba keys it
    # by source and CPU: another CPU compiles again at start).
    # At this script's niceness (the engine's processes do not inherit it from the CLI).
    "$DOCKER" run --name "$cid" --network none -v "$stage:/stage:ro" "$(base_tag)" \
        nice -n "$(nice)" sh -euc '
        python3 -m venv /opt/dlsroute
        /opt/dlsroute/bin/pip install --quiet --disable-pip-version-check --no-index \
            --no-deps /stage/wheels/*.whl
        echo "[images.sh] node: installed in the image"
        mkdir -p /app && cp -r /stage/examples /app/examples
        cd /app && /opt/dlsroute/bin/python -c "from broker_node.rehearsal import rehearse; from broker_node.service import NodeService as N; print(\"kernels compiled in %.1f s\" % rehearse(N))"
        /opt/dlsroute/bin/dlsroute --help >/dev/null' >&2 \
        || { "$DOCKER" rm -f "$cid" >/dev/null 2>&1; die "node image build failed"; }
    log "node: container done ($((SECONDS - t0)) s)"
    commit_image "$cid" "$tag" -c 'ENTRYPOINT ["dlsroute"]' -c 'CMD ["--help"]' \
        -c 'WORKDIR /app' -c 'ENV PYTHONUNBUFFERED=1' \
        -c 'ENV PATH=/opt/dlsroute/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c "LABEL org.dlsroute.image=node"
    rm -rf "$stage"
    log "$tag built in $((SECONDS - t0)) s"
}

cmd_build() {
    "$DOCKER" info >/dev/null 2>&1 || die "no Docker engine answers (bash docker/engine.sh up)"
    local t0=$SECONDS
    build_base
    build_kafka
    build_node
    log "images ready in $((SECONDS - t0)) s"
    cmd_env
}

cmd_env() {
    echo "DLS_KAFKA_IMAGE=$(kafka_tag)"
    echo "DLS_NODE_IMAGE=$(node_tag)"
}

cmd_status() {
    local tag rc=0
    for tag in "$(base_tag)" "$(kafka_tag)" "$(node_tag)"; do
        if have_image "$tag"; then echo "present: $tag"; else echo "missing: $tag"; rc=3; fi
    done
    return $rc
}

case "${1:-build}" in
    build) cmd_build ;;
    env) cmd_env ;;
    status) cmd_status ;;
    mirror) debian_mirror ;;
    *) echo "usage: $0 {build|env|status|mirror}" >&2; exit 2 ;;
esac
