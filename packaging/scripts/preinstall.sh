#!/bin/sh
# deb preinst / rpm %pre: create the service user before the files are
# unpacked, so /var/lib/gpuscope is unpacked owned by it.
# deb calls this with "install" or "upgrade"; rpm with 1 (install) or 2
# (upgrade).
set -e

if ! getent group gpuscope >/dev/null 2>&1; then
    groupadd --system gpuscope
fi
if ! getent passwd gpuscope >/dev/null 2>&1; then
    useradd --system --gid gpuscope --no-create-home \
        --home-dir /var/lib/gpuscope --shell /usr/sbin/nologin \
        --comment "gpuscope monitoring" gpuscope
fi
# Where a distribution makes the NVIDIA device nodes 0660 group video
# instead of the driver's default 0666, NVML needs the group. The unit's
# DevicePolicy still limits the service to the NVIDIA nodes and /dev/kmsg.
if getent group video >/dev/null 2>&1; then
    usermod --append --groups video gpuscope
fi
exit 0
