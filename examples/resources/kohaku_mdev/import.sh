# A mediated device is imported by its UUID, or as <host>/<uuid> for a host of
# the provider's hosts map. Its parent and type are read from the host.
terraform import kohaku_mdev.vgpu 6b6f6861-6b75-4d64-8000-000000000001
terraform import kohaku_mdev.second gpu2/6b6f6861-6b75-4d64-8000-000000000001
