#!/usr/bin/env bash
# Build a Debian bookworm base image without pulling from a registry:
#   debootstrap --variant=minbase bookworm -> python3 (3.11), python3-venv, redis-server, ca-certificates
#   -> docker import as IMAGE (default local/base:bookworm).
# The host's extra CA certificates (/usr/local/share/ca-certificates/*.crt, e.g. a corporate proxy's)
# are copied in at build time so that pip inside image builds trusts the same proxy. They end up in the
# image only, never in the repository.
# Usage: scripts/build_base_image.sh [IMAGE]   (root; needs debootstrap and a running Docker engine)
set -euo pipefail

IMAGE=${1:-local/base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES="python3 python3-venv redis-server ca-certificates"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE exists"
    exit 0
fi

ROOTFS=$(mktemp -d /tmp/sluice-rootfs.XXXXXX)
cleanup() {
    umount "$ROOTFS/proc" 2>/dev/null || true
    rm -rf --one-file-system "$ROOTFS"
}
trap cleanup EXIT

echo "debootstrap $SUITE into $ROOTFS"
timeout 600 debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
    tail -20 "$ROOTFS.log"
    exit 1
}
rm -f "$ROOTFS.log"

# No daemon may start inside the chroot while packages install.
printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
chmod +x "$ROOTFS/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mount -t proc proc "$ROOTFS/proc"

mkdir -p "$ROOTFS/usr/local/share/ca-certificates"
shopt -s nullglob
extra_certs=(/usr/local/share/ca-certificates/*.crt)
shopt -u nullglob
if ((${#extra_certs[@]})); then
    cp "${extra_certs[@]}" "$ROOTFS/usr/local/share/ca-certificates/"
fi

chroot "$ROOTFS" /bin/sh -c "
    set -e
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o APT::Sandbox::User=root update
    apt-get -o APT::Sandbox::User=root install -y --no-install-recommends $PACKAGES
    update-ca-certificates
    apt-get clean
    rm -rf /var/lib/apt/lists/*
" >"$ROOTFS.log" 2>&1 || {
    tail -20 "$ROOTFS.log"
    exit 1
}
rm -f "$ROOTFS.log"

umount "$ROOTFS/proc"
rm -f "$ROOTFS/usr/sbin/policy-rc.d"
: >"$ROOTFS/etc/resolv.conf"

echo "importing $IMAGE"
tar --numeric-owner -C "$ROOTFS" -c . |
    docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$IMAGE" >/dev/null
echo "built base image $IMAGE"
