"""`python -m tests.fakes.oidc_provider.run PORT DIR`: migrate a fresh SQLite database in
DIR, make an RSA key and the platform's client application (id `platform`, secret
`platform-secret`, redirect URIs from OIDC_FAKE_REDIRECT_URIS), then serve on 127.0.0.1."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    port, directory = int(sys.argv[1]), Path(sys.argv[2])
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    os.environ["OIDC_FAKE_KEY"] = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    os.environ["OIDC_FAKE_DB"] = str(directory / "provider.sqlite3")
    os.environ["OIDC_FAKE_ISSUER"] = f"http://127.0.0.1:{port}/o"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.fakes.oidc_provider.settings"

    import django

    django.setup()
    from django.core.management import call_command
    from django.core.servers.basehttp import run
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    Application.objects.create(
        name="platform",
        client_id="platform",
        client_secret="platform-secret",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=os.environ.get("OIDC_FAKE_REDIRECT_URIS", "http://testserver/sso/callback/"),
        skip_authorization=True,
        algorithm=Application.RS256_ALGORITHM,
    )
    print("ready", flush=True)
    run("127.0.0.1", port, get_wsgi_application(), threading=True)


if __name__ == "__main__":
    main()
