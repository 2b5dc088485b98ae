# A vGPU is imported as <gpu>/<vf>, or <host>/<gpu>/<vf> for a host of the
# provider's hosts map; its type is read from the VF.
terraform import kohaku_vgpu.pinned gpu1/0000:3d:00.0/0000:3d:00.4
