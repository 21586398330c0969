"""The receivers' replies go from recorded webhook errors (issue 23: an SSRF showed an internal
service's reply in the admin). A failed attempt was recorded as "HTTP <status>: <the first 300
characters of the body>"; the status stays, the body goes (also from the webhook's last error and the
delivery job runs' errors). Nothing to undo."""

from django.db import migrations

SCRUB = r"""
UPDATE memoryapp_webhookdelivery SET error = regexp_replace(error, '^(HTTP [0-9]{3}): .*$', '\1')
 WHERE error ~ '^HTTP [0-9]{3}: ';
UPDATE memoryapp_webhook SET last_error = regexp_replace(last_error, '^(HTTP [0-9]{3}): .*$', '\1')
 WHERE last_error ~ '^HTTP [0-9]{3}: ';
UPDATE governance_jobrun SET error = regexp_replace(error, '(webhook [0-9]+: HTTP [0-9]{3}): .*$', '\1')
 WHERE kind = 'webhook_delivery' AND error ~ 'webhook [0-9]+: HTTP [0-9]{3}: ';
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0027_file_version_redaction_reason"),
        ("governance", "0009_export_include_vectors"),
    ]

    operations = [migrations.RunSQL(sql=SCRUB, reverse_sql=migrations.RunSQL.noop)]
