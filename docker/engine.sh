#!/usr/bin/env bash
# A Docker engine for `make images` and the docker tests: installs Debian's docker.io,
# debootstrap and docker-compose where missing (root: apt-get), and starts dockerd in the
# background where none answers (no systemd needed; its log: var/dockerd.log). Exits 1 saying
# why when it cannot; `make test` then skips the docker tests (CI fails them).
set -uo pipefail
cd "$(dirname "$0")/.."
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (Debian packages) for the images and the docker tests" >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 || {
    $SUDO apt-get update -q >&2 &&
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
  } || { echo "could not install ${missing[*]}" >&2; exit 1; }
fi
if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "the Docker daemon does not answer; start it (sudo dockerd &, or systemctl start docker)" >&2
  exit 1
fi
mkdir -p var
echo "starting dockerd in the background (log: var/dockerd.log)" >&2
nohup dockerd >var/dockerd.log 2>&1 &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "dockerd did not answer within 60 s; see var/dockerd.log" >&2
exit 1
