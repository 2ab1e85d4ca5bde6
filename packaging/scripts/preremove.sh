#!/bin/sh
# deb prerm / rpm %preun: on removal (not on upgrade) stop and disable the
# service. deb calls this with "remove" or "upgrade"; rpm with 0 (erase) or
# 1 (upgrade).
set -e

case "$1" in
    remove|0) ;;
    *) exit 0 ;;
esac

command -v systemctl >/dev/null 2>&1 || exit 0
systemctl disable gpuscope.service gpuscope-agent.service >/dev/null 2>&1 || true
if [ -d /run/systemd/system ]; then
    systemctl stop gpuscope.service gpuscope-agent.service || true
fi
exit 0
