#!/bin/sh
# deb postrm / rpm %postun. Removal keeps the data in /var/lib/gpuscope and
# the service user; `dpkg --purge` / `apt purge` also deletes the data (dpkg
# removes the conffile itself). rpm has no purge: after `rpm -e` delete the
# data by hand (rm -rf /var/lib/gpuscope); an edited config is kept as
# /etc/gpuscope/gpuscope.yml.rpmsave.
# The user stays even on purge, as Debian policy advises: files it owned
# elsewhere (backups, snapshots) must not end up owned by a reused uid.
set -e

if [ "$1" = purge ]; then
    rm -rf /var/lib/gpuscope
    rmdir /etc/gpuscope 2>/dev/null || true
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
exit 0
