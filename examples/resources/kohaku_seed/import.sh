# A seed is imported by <pool>/<volume name>, or <host>/<pool>/<volume name>
# for a host of the provider's hosts map. Inputs such as user and network are
# not stored in the ISO in a form that can be read back: after an import,
# write the configuration that produced the seed; the plan then shows no
# content change when it renders the same ISO.
terraform import kohaku_seed.web default/web-1-seed.iso
