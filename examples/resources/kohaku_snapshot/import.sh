# A snapshot is imported by its id: `<vm uuid>/<name>`, or `<host>/<vm uuid>/<name>`
# on a host of the provider's hosts map.
terraform import kohaku_snapshot.before_upgrade 5a1d9c4e-3f00-4b2a-9c1e-0d2f6b7a8e91/before-upgrade
