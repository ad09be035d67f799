#!/usr/bin/env bash
# Installs what servelab needs to build and test, and nothing that is already there.
# Debian packages via apt-get; Python packages (test and model tooling only) via pip.
set -euo pipefail

apt_pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libcjson-dev libsentencepiece-dev
          sentencepiece libcurl4-openssl-dev clang libclang-rt-14-dev python3 python3-pip
          prometheus libssl-dev libxxhash-dev curl libpcre2-dev libutf8proc-dev)
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

# Python packages: module name -> pip requirement.
declare -A py_pkgs=([numpy]="numpy>=1.24" [openai]="openai>=1.40" [tokenizers]="tokenizers>=0.20")
py_missing=()
for mod in "${!py_pkgs[@]}"; do
    python3 -c "import $mod" 2>/dev/null || py_missing+=("${py_pkgs[$mod]}")
done
if ((${#py_missing[@]})); then
    echo "install-deps: pip install ${py_missing[*]}"
    python3 -m pip install -q "${py_missing[@]}" 2>/dev/null ||
        python3 -m pip install -q --break-system-packages "${py_missing[@]}"
fi
