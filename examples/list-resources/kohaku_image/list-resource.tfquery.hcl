# terraform query lists the disk images in the default pool, whoever put
# them there; terraform query -generate-config-out=adopt.tf writes a
# kohaku_image block and an import block for each, which the next apply
# adopts without uploading anything. Add source before a change that would
# replace an adopted image.
list "kohaku_image" "base_images" {
  provider = kohaku
  config {
    pool = "default"
  }
}
