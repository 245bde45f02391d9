#!/usr/bin/env bash
# Fetch every wheel the image needs into wheels/, on a machine that reaches a package index,
# so that `docker build` needs no network (the build host may have none). The wheels are for
# the base image's Python and C library, not this machine's: CPython 3.11 (cp311) and glibc
# 2.36, which runs manylinux_2_28 wheels and older. Check yours with
#   docker run --rm szbench/python-numpy:bookworm sh -c 'python3 -V; ldd --version | head -n1'
# and set PYTHON_VERSION to match another base.
#
# Usage: ./download-wheels.sh [requirements.txt|requirements-gpu.txt]
set -euo pipefail
cd "$(dirname "$0")"
requirements=${1:-requirements.txt}
python=${PYTHON:-python3}
python_version=${PYTHON_VERSION:-3.11}
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
args=(--dest wheels --only-binary=:all: --python-version "$python_version" --implementation cp)
for p in "${platforms[@]}"; do args+=(--platform "$p"); done
# pip itself, run from its wheel at build time: the base image has no pip.
"$python" -m pip download --quiet "${args[@]}" --requirement "$requirements" "pip==${PIP_VERSION:-26.3}"
ls wheels
