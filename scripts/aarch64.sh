#!/usr/bin/env bash
# ARM64 checks on an x86-64 machine: lints for aarch64, the library's tests
# and the example model under qemu (a plain ARMv8.0 core and qemu's default
# core with dotprod/fp16/i8mm), and Android/iOS type-checks.
#
# rustup cannot add targets here, so the toolchain is Debian's `rustc-web`
# (an x86-64 compiler) with its arm64 standard library, unpacked into
# $RAMIFY_AARCH64_HOME (default <repo>/target/aarch64-toolchain) without
# touching the system's dpkg architectures. qemu-user and the aarch64 cross
# linker come from apt. Everything is idempotent: a second run reuses the
# unpacked toolchain and the build directory.
#
# Usage: scripts/aarch64.sh [setup|clippy|test|mobile|count|all]   (default: all)
#        scripts/aarch64.sh count [MODEL...]     (instructions: NEON vs portable)
#        scripts/aarch64.sh profile MODEL [TOP]   (instructions per function)
#        scripts/aarch64.sh cargo ARGS...   (cargo with the aarch64 toolchain)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

home="${RAMIFY_AARCH64_HOME:-$repo/target/aarch64-toolchain}"
prefix="$home/prefix"
target=aarch64-unknown-linux-gnu
# Its own build directory: the Debian compiler's artifacts never mix with
# the host toolchain's.
export CARGO_TARGET_DIR="$repo/target/aarch64"

log() { echo "aarch64.sh: $*"; }

apt_install() {
    local missing=()
    command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
    command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
    [[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]] || missing+=(libc6-dev-arm64-cross)
    if ((${#missing[@]})); then
        if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
            echo "aarch64.sh: needs ${missing[*]} (apt-get install as root)" >&2
            exit 1
        fi
        log "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# Debian's rustc-web and its arm64 std, at the candidate version of the day
# (security updates move it), unpacked into $prefix.
fetch_toolchain() {
    if [[ -x "$prefix/usr/bin/rustc" && -d "$prefix/usr/lib/rustlib/$target/lib" \
        && -x "$prefix/usr/bin/clippy-driver" && -d "$prefix/usr/lib/rustlib/src" ]]; then
        return
    fi
    local version llvm sources=/etc/apt/sources.list.d/ramify-arm64.sources
    version=$(apt-cache policy rustc-web | sed -n 's/ *Candidate: //p')
    if [[ -z "$version" || "$version" == "(none)" ]]; then
        apt-get update -qq
        version=$(apt-cache policy rustc-web | sed -n 's/ *Candidate: //p')
    fi
    local series=${version%%+*}
    series=${series%.*}
    llvm=$(apt-cache depends "libstd-rust-web-$series=$version" | sed -n 's/.*Depends: \(libllvm[0-9]*\)$/\1/p' | head -1)
    log "fetching rustc-web $version (std $series, $llvm) for $target"
    # A temporary arm64 view of the machine's own Debian sources.
    sed 's/^Types: deb$/Types: deb\nArchitectures: arm64/' \
        /etc/apt/sources.list.d/debian.sources >"$sources"
    trap 'rm -f "$sources"' EXIT
    apt-get update -qq -o APT::Architectures=amd64,arm64 2>/dev/null
    local dl
    dl=$(mktemp -d)
    (cd "$dl" && apt-get download -q -o APT::Architectures=amd64,arm64 \
        "rustc-web=$version" "libstd-rust-web-$series=$version" \
        "libstd-rust-web-dev=$version" "libstd-rust-web-dev:arm64=$version" \
        "rust-web-clippy=$version" "rust-web-src=$version" "$llvm" 2>&1 | grep -v -e unsandboxed -e "^W:" || true)
    rm -f "$sources"
    trap - EXIT
    apt-get update -qq 2>/dev/null || true
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    rm -rf "$dl"
}

# Environment for cargo: the Debian compiler, the cross linker, qemu as the
# test runner.
toolchain_env() {
    export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export RUSTC="$prefix/usr/bin/rustc"
    export RUSTDOC="$prefix/usr/bin/rustdoc"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
    export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
    export CARGO_INCREMENTAL=0
}

setup() {
    apt_install
    fetch_toolchain
    toolchain_env
    log "$("$RUSTC" --version)"
}

# The Debian clippy, driven by the host cargo (cargo-clippy finds its
# sibling clippy-driver).
clippy() {
    log "clippy for $target"
    "$prefix/usr/bin/cargo-clippy" clippy -q --workspace --all-targets --target "$target" -- -D warnings
}

# Under emulation a test runs 10-50x slower than natively, and building
# the tests for aarch64 costs as much CPU as the host's, so the set is
# chosen. On a plain ARMv8.0 core (QEMU_CPU=cortex-a53, NEON only): the
# library's unit tests (every kernel against its reference, serial against
# parallel; 1.5 min), the light models against their reference outputs and
# parallel against serial bit for bit (4 min), the fusions with the example
# model against its reference outputs, and the ONNX node conformance suite
# (40 s). On qemu's default core (dotprod, fp16, i8mm, SVE) the same but the
# light models: no kernel yet picks a path by those features, so that run
# guards against a feature check gone wrong rather than new code paths.
# The example model also runs in the fusion tests, so no separate command
# line build (a third compile of the library) is needed.
test_suite() {
    local tests=(--lib --test fusion --test linear_fusion --test conformance)
    cargo test -q -p ramify --target "$target" "${tests[@]}" --test light_models --no-run
    log "tests under qemu -cpu cortex-a53"
    QEMU_CPU=cortex-a53 cargo test -q -p ramify --target "$target" "${tests[@]}" --test light_models
    log "tests under qemu -cpu max"
    QEMU_CPU=max cargo test -q -p ramify --target "$target" "${tests[@]}"
}

# Android and iOS cannot be linked here (no NDK, no Apple SDK): the library
# and the C API are type-checked against std built from source.
mobile() {
    local t
    for t in aarch64-linux-android aarch64-apple-ios; do
        log "type-check for $t"
        RUSTC_BOOTSTRAP=1 cargo check -q -p ramify -p ramify-ffi -Zbuild-std=std,panic_abort --target "$t"
    done
}

# The performance proxy: guest instructions executed (a QEMU plugin of our
# own, scripts/qemu_insn_count.c, built against the plugin header of the
# installed qemu-user's Debian source package), per model, with the NEON
# kernels and with the portable code (RAMIFY_PORTABLE_KERNELS=1). One
# thread, so the count is the work, not the scheduling.
plugin() {
    local lib="$home/libinsncount.so"
    [[ -f "$lib" && "$lib" -nt scripts/qemu_insn_count.c ]] && return
    local version src=/etc/apt/sources.list.d/ramify-src.sources dl
    version=$(dpkg-query -W -f='${Version}' qemu-user)
    version=${version%+b[0-9]*}
    log "fetching the plugin header of qemu $version"
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$src"
    trap 'rm -f "$src"' EXIT
    apt-get update -qq 2>/dev/null
    dl=$(mktemp -d)
    (cd "$dl" && apt-get source --download-only -q "qemu=$version" 2>&1 | grep -v -e unsandboxed -e "^W:" || true)
    rm -f "$src"
    trap - EXIT
    apt-get update -qq 2>/dev/null || true
    tar -xJf "$dl"/qemu_*.orig.tar.xz -C "$dl" --wildcards '*/include/qemu/qemu-plugin.h'
    gcc -shared -fPIC -O2 -Wall -I "$(dirname "$(find "$dl" -name qemu-plugin.h | head -1)")" \
        -o "$lib" scripts/qemu_insn_count.c
    rm -rf "$dl"
}

count() {
    plugin
    cargo build -q --release -p ramify-cli --target "$target"
    local bin="$CARGO_TARGET_DIR/$target/release/ramify" out model neon portable
    out=$(mktemp)
    printf '%-34s %16s %16s %8s\n' model neon portable ratio
    local models=("$@")
    if ((${#models[@]} == 0)); then
        models=(models/inception_mini.onnx
            tests/data/generated/light/{squeezenet,inception_v1,resnet50}/model.onnx
            tests/data/generated/quant/{squeezenet,mobilenet_v2,resnet50}_{qdq,qop}/model.onnx)
    fi
    for model in "${models[@]}"; do
        [[ -f "$model" ]] || continue
        qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin "$home/libinsncount.so,outfile=$out" \
            "$bin" run "$model" --cpus 1 >/dev/null
        neon=$(sed -n 's/^insns: //p' "$out")
        RAMIFY_PORTABLE_KERNELS=1 qemu-aarch64 -L /usr/aarch64-linux-gnu \
            -plugin "$home/libinsncount.so,outfile=$out" "$bin" run "$model" --cpus 1 >/dev/null
        portable=$(sed -n 's/^insns: //p' "$out")
        printf '%-34s %16s %16s %8.3f\n' "$(basename "$(dirname "$model")")/$(basename "$model")" \
            "$neon" "$portable" "$(echo "$neon / $portable" | bc -l)"
    done
    rm -f "$out"
}

# Where one model's instructions go, per function: the NEON build, or the
# portable code with PORTABLE=1.
profile() {
    local model="${1:?usage: scripts/aarch64.sh profile MODEL [TOP]}" syms
    plugin
    cargo build -q --release -p ramify-cli --target "$target"
    syms=$(mktemp)
    RAMIFY_PORTABLE_KERNELS="${PORTABLE:-0}" qemu-aarch64 -L /usr/aarch64-linux-gnu \
        -plugin "$home/libinsncount.so,symbols=$syms" \
        "$CARGO_TARGET_DIR/$target/release/ramify" run "$model" --cpus 1 >/dev/null 2>&1
    python3 scripts/insn_profile.py "$syms" --top "${2:-25}"
    rm -f "$syms"
}

cmd="${1:-all}"
setup
case "$cmd" in
setup) ;;
clippy) clippy ;;
test) test_suite ;;
mobile) mobile ;;
count) count "${@:2}" ;;
profile) profile "${@:2}" ;;
cargo)
    # Any cargo command with the toolchain, e.g.
    # scripts/aarch64.sh cargo test --target aarch64-unknown-linux-gnu -p ramify --lib conv
    shift
    cargo "$@"
    ;;
all)
    clippy
    test_suite
    mobile
    ;;
*)
    echo "usage: scripts/aarch64.sh [setup|clippy|test|mobile|count|all|cargo ARGS...]" >&2
    exit 2
    ;;
esac
