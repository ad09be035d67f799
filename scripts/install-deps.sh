#!/usr/bin/env bash
# Installs what servelab needs, and nothing that is already there.
#   scripts/install-deps.sh run    to build and serve: the compiler and libraries, python3 and
#                                  the packages tools/import-gguf needs (make run)
#   scripts/install-deps.sh test   all of run, plus what the tests use: ccache (make test's four
#                                  builds take what an earlier run compiled from it), clang and its fuzzing
#                                  runtime, Prometheus, Chromium (the lab page's browser test),
#                                  nginx (the lab scenarios' gateway and load balancer) and its
#                                  Prometheus exporter,
#                                  sentencepiece's trainer (tools/make_model.py),
#                                  the openai, tokenizers and jsonschema packages (make test; the
#                                  default)
# Debian packages via apt-get; Python packages via pip.
set -euo pipefail
what=${1:-test}
case $what in run | test) ;; *) echo "usage: $0 [run|test]" >&2; exit 2 ;; esac

apt_pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libcjson-dev libsentencepiece-dev
          libcurl4-openssl-dev libssl-dev libxxhash-dev libpcre2-dev libutf8proc-dev libopenblas-dev python3 python3-pip curl)
# Python packages: module name -> pip requirement. gguf brings numpy.
declare -A py_pkgs=([numpy]="numpy>=1.24" [gguf]="gguf>=0.17")
if [ "$what" = test ]; then
    apt_pkgs+=(ccache sentencepiece clang libclang-rt-14-dev prometheus prometheus-nginx-exporter chromium nginx-light)
    py_pkgs+=([openai]="openai>=1.40" [tokenizers]="tokenizers>=0.20" [jsonschema]="jsonschema>=4.18")
fi

missing=()
for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: apt-get install ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py_missing=()
for mod in "${!py_pkgs[@]}"; do
    python3 -c "import $mod" 2>/dev/null || py_missing+=("${py_pkgs[$mod]}")
done
if ((${#py_missing[@]})); then
    echo "install-deps: pip install ${py_missing[*]}"
    python3 -m pip install -q "${py_missing[@]}" 2>/dev/null ||
        python3 -m pip install -q --break-system-packages "${py_missing[@]}"
fi
