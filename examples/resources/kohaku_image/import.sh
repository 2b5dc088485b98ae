# An image is imported by <pool>/<volume name>, or <host>/<pool>/<volume name>
# for a host of the provider's hosts map. Its source is not stored on the
# host: write it in the configuration when you know it (only a replacement
# needs it); the first plan after the import takes it without replacing the
# volume (its digest stays unknown until then).
terraform import kohaku_image.debian12_raw default/debian-12-genericcloud-amd64.raw
