# A backup is imported by its id: `<pool>/<name>`, or `<host>/<pool>/<name>` on a
# host of the provider's hosts map. The import reads the whole volume back and
# refuses one without its manifest or that no longer matches it.
terraform import kohaku_backup.pgdata vault/backups/db-pgdata.nightly.qcow2
