#!/bin/sh
# deb postinst / rpm %post: enable the service and start it, or restart it
# on upgrade. deb calls this with "configure" and the previously configured
# version (empty on a first install); rpm with 1 (install) or 2 (upgrade).
#
# Enabling only writes symlinks and works in a chroot or an image build;
# starting needs a running systemd, so it happens only where systemd is PID 1
# (/run/systemd/system exists). A failed start is reported, not fatal: the
# package stays installed and `journalctl -u gpuscope` says why.
set -e

case "$1" in
    configure)
        if [ -z "$2" ]; then action=install; else action=upgrade; fi ;;
    1) action=install ;;
    2) action=upgrade ;;
    *) exit 0 ;;
esac

# Upgrades from packages that predate StateDirectory= or a changed user.
chown gpuscope:gpuscope /var/lib/gpuscope
chmod 0750 /var/lib/gpuscope

command -v systemctl >/dev/null 2>&1 || exit 0

if [ "$action" = install ]; then
    systemctl enable gpuscope.service >/dev/null 2>&1 ||
        echo "gpuscope: could not enable gpuscope.service; enable it with: systemctl enable --now gpuscope" >&2
fi

if [ ! -d /run/systemd/system ]; then
    # A chroot, a container, or a machine booted without systemd: say how
    # to run it, once, rather than leave the user wondering.
    [ "$action" = install ] &&
        echo "gpuscope: installed but not started (systemd is not running here); start it with: systemctl start gpuscope, or run /usr/bin/gpuscope serve --config.file=/etc/gpuscope/gpuscope.yml --storage.tsdb.path=/var/lib/gpuscope as user gpuscope" >&2
    exit 0
fi

systemctl daemon-reload || true
# deb-systemd-invoke honours policy-rc.d (image builds that forbid starts).
invoke() {
    if command -v deb-systemd-invoke >/dev/null 2>&1; then
        deb-systemd-invoke "$1" "$2" || echo "gpuscope: $1 $2 failed; see journalctl -u $2" >&2
    else
        systemctl "$1" "$2" || echo "gpuscope: $1 $2 failed; see journalctl -u $2" >&2
    fi
}
# The agent (gpuscope-agent.service) is installed disabled: it runs only
# where an admin enabled it instead of the appliance (they conflict), and
# an upgrade restarts whichever of the two runs.
if [ "$action" = install ]; then
    invoke start gpuscope.service
else
    invoke try-restart gpuscope.service
    invoke try-restart gpuscope-agent.service
fi
exit 0
