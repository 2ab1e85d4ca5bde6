#!/usr/bin/python3
"""A real SMTP server for gpuscope's email receiver test (e2e/receivers_test.go).

aiosmtpd (Debian's python3-aiosmtpd) on loopback: STARTTLS with the given
certificate is required before anything else, and AUTH (PLAIN or LOGIN) with
the one user and password before MAIL. Each message accepted is written to
OUTDIR as <n>.eml (the bytes as received) with <n>.json beside it (envelope
sender and recipients, the authenticated login, whether the session was
TLS). Prints "ready" once it accepts connections; stops on SIGTERM.

usage: smtpd.py PORT CERT KEY USER PASSWORD OUTDIR [MECHANISMS]

MECHANISMS is "LOGIN PLAIN" (the default; Alertmanager takes the first the
server lists) or "PLAIN". AUTH LOGIN's challenges are "Username:" and
"Password:", as Postfix (with Dovecot's or Cyrus's SASL) and most MTAs send
them; aiosmtpd's own, Microsoft's "User Name\\0", is one Alertmanager's LOGIN
does not answer ("unexpected server challenge").
"""
import json
import os
import signal
import ssl
import sys
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


def main():
    port, cert, key, user, password, outdir = sys.argv[1:7]
    mechanisms = (sys.argv[7] if len(sys.argv) > 7 else "LOGIN PLAIN").split()
    SMTP.AuthLoginUsernameChallenge = "Username:"
    SMTP.AuthLoginPasswordChallenge = "Password:"

    class Handler:
        def __init__(self):
            self.n = 0
            self.lock = threading.Lock()

        async def handle_DATA(self, server, session, envelope):
            with self.lock:
                self.n += 1
                n = self.n
            base = os.path.join(outdir, str(n))
            with open(base + ".eml.tmp", "wb") as f:
                f.write(envelope.original_content)
            meta = {
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "login": session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None,
                "tls": session.ssl is not None and bool(session.ssl),
            }
            with open(base + ".json", "w") as f:
                json.dump(meta, f)
            os.rename(base + ".eml.tmp", base + ".eml")
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword)
              and auth_data.login == user.encode()
              and auth_data.password == password.encode())
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    controller = Controller(
        Handler(),
        hostname="127.0.0.1",
        port=int(port),
        tls_context=ctx,
        require_starttls=True,
        authenticator=authenticator,
        auth_required=True,
        auth_require_tls=True,
        auth_exclude_mechanism=[m for m in ("LOGIN", "PLAIN") if m not in mechanisms],
    )
    controller.start()
    print("ready", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    controller.stop()


if __name__ == "__main__":
    main()
