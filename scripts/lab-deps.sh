#!/bin/sh
# Install what the sparkbase lab (emulated fleet) needs on a fresh Debian/Ubuntu box.
# Idempotent. Never starts the machine's own sshd: the lab runs one sshd per node,
# bound to 127.0.0.1 inside each node's namespaces.
set -eu
if [ "$(id -u)" -ne 0 ]; then
    echo "lab-deps.sh: run as root" >&2
    exit 1
fi
PKGS="openssh-server openssh-client python3 python3-yaml dpkg-dev util-linux iproute2 openssl"
missing=""
for p in $PKGS; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "lab-deps.sh: all present ($PKGS)"
    exit 0
fi
# keep package scripts from starting services (the machine's sshd stays stopped)
created_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing
if [ -n "$created_policy" ]; then
    rm -f /usr/sbin/policy-rc.d
fi
echo "lab-deps.sh: installed$missing"
