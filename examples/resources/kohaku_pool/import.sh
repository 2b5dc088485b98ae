# A pool is imported by its name, or as <host>/<name> for a host of the
# provider's hosts map. Its path and autostart are read from the host;
# force_destroy starts as false.
terraform import kohaku_pool.vms vms
terraform import kohaku_pool.scratch gpu2/scratch
