#!/usr/bin/env bash
# Installs the system packages the build needs, when missing (fresh machines, CI):
# - libcurl headers: librdkafka 2.12.1 includes <curl/curl.h> even when built without curl
#   (confluentinc/librdkafka#5135, fede1024/rust-rdkafka#829); only the header is used.
# - cmake, a C/C++ compiler, pkg-config: to build the bundled librdkafka.
# - Java 17 and Maven: to fetch and run Kafka; curl: used by `make up`.
# - prometheus (and its promtool): `make up` runs it; `make test` checks and tests the rules.
# - chromium and chromium-driver: `make test` drives the tenant portal in a real browser.
set -euo pipefail

missing=()
[[ -f /usr/include/x86_64-linux-gnu/curl/curl.h || -f /usr/include/curl/curl.h ]] || missing+=(libcurl4-openssl-dev)
command -v cmake >/dev/null || missing+=(cmake)
command -v cc >/dev/null || missing+=(build-essential)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v curl >/dev/null || missing+=(curl)
command -v psql >/dev/null || missing+=(postgresql-client)
command -v python3 >/dev/null || missing+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)  # the Python inbox receiver's venv (scripts/setup/inbox-receivers.sh)
command -v npm >/dev/null || missing+=(nodejs npm)  # the Node inbox receiver (examples/inbox-node)
command -v prometheus >/dev/null || missing+=(prometheus)  # `make up` runs it; promtool checks and tests the alert rules
command -v buildah >/dev/null || missing+=(buildah)  # scripts/check/image.sh builds and runs the image without Docker
command -v chromium >/dev/null || missing+=(chromium)  # the tenant portal's browser test (services/api/tests/portal_browser.rs)
command -v chromedriver >/dev/null || missing+=(chromium-driver)  # drives it through WebDriver

if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "[setup] missing packages: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "[setup] installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
