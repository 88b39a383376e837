#!/usr/bin/env bash
# Build the local base image when no registry can be pulled from:
#   deploy/base-image.sh [TAG]            (default stint-base:bookworm)
#
# A Debian bookworm root filesystem from Debian's own packages (debootstrap
# --variant=minbase, plus Debian's python3 3.11 and venv), imported into the engine
# that DOCKER_HOST names. Build the images on it with
#   docker build --build-arg BASE_IMAGE=stint-base:bookworm ...
#
# CA certificates that this host trusts beyond Debian's bundle (a TLS-intercepting
# package proxy's, say) are added to the image, so pip and apt inside builds reach
# the same registries the host does.
#
# The root filesystem is cached as a tarball (STINT_BASE_CACHE, default
# /var/cache/stint), keyed by this script's contents and the host's extra CAs: a
# second run imports the tarball in seconds; an image that already exists with the
# same key is kept as it is. The key covers the suite, packages, mirrors, RECIPE
# (bump it when the steps below change what the root filesystem holds) and the CAs.
set -euo pipefail

TAG=${1:-stint-base:bookworm}
SUITE=bookworm
MIRROR=${STINT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${STINT_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PACKAGES=python3,python3-venv,ca-certificates
CACHE=${STINT_BASE_CACHE:-/var/cache/stint}
RECIPE=2
HOST_BUNDLE=${STINT_HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

die() {
    echo "base-image.sh: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v docker >/dev/null || die "no docker client"
if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || die "no debootstrap (install Debian's debootstrap)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

work=$(mktemp -d /var/tmp/stint-base.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The host's extra CAs: certificates in its bundle that Debian's ca-certificates lacks.
python3 - "$HOST_BUNDLE" "$work/extra-ca" <<'PY'
import glob, os, re, sys

pem = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)
bundle, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
known = set()
for path in glob.glob("/usr/share/ca-certificates/**/*.crt", recursive=True):
    known.update(m.group(0) for m in pem.finditer(open(path).read()))
host = open(bundle).read() if os.path.exists(bundle) else ""
for i, cert in enumerate(c for c in (m.group(0) for m in pem.finditer(host)) if c not in known):
    with open(os.path.join(out, f"host-extra-{i}.crt"), "w") as f:
        f.write(cert + "\n")
PY

key=$( {
    echo "$RECIPE $SUITE $PACKAGES $MIRROR $SECURITY_MIRROR"
    cat "$work"/extra-ca/*.crt 2>/dev/null || true
} | sha256sum | cut -c1-16)
if [ "$(docker image inspect --format '{{index .Config.Labels "org.stint.base-key"}}' "$TAG" 2>/dev/null)" = "$key" ]; then
    echo "base-image.sh: $TAG is up to date (key $key)" >&2
    exit 0
fi

tarball="$CACHE/stint-base-$SUITE-$key.tar"
if [ ! -f "$tarball" ]; then
    started=$SECONDS
    rootfs="$work/rootfs"
    echo "base-image.sh: debootstrap --variant=minbase $SUITE (+ $PACKAGES)" >&2
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
        >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
SOURCES
    # Keep images small: later apt-get installs bring no recommends, keep no .debs,
    # and unpack no documentation or translations.
    cat >"$rootfs/etc/apt/apt.conf.d/90stint" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
APT::Keep-Downloaded-Packages "false";
APT
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/90stint" <<'DPKG'
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
DPKG
    if compgen -G "$work/extra-ca/*.crt" >/dev/null; then
        cp "$work"/extra-ca/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
    fi
    chroot "$rootfs" apt-get clean
    rm -rf "${rootfs:?}"/var/lib/apt/lists/* "${rootfs:?}"/var/cache/apt/*.bin \
        "${rootfs:?}"/usr/share/doc/* "${rootfs:?}"/usr/share/man/* "${rootfs:?}"/usr/share/info/* \
        "${rootfs:?}"/var/log/*.log "${rootfs:?}"/tmp/*
    find "${rootfs:?}/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    mkdir -p "$CACHE"
    tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    # Older tarballs (another key) are of no further use.
    find "$CACHE" -maxdepth 1 -name "stint-base-$SUITE-*.tar" ! -name "$(basename "$tarball")" -delete
    echo "base-image.sh: root filesystem built in $((SECONDS - started))s, cached at $tarball" >&2
fi

started=$SECONDS
docker import \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL org.stint.base-key=$key org.stint.base-suite=$SUITE" \
    "$tarball" "$TAG" >/dev/null
echo "base-image.sh: imported $TAG in $((SECONDS - started))s" >&2
