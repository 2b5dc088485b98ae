package hostapi

// BackupTarget is one disk of a running domain to copy through libvirt's
// backup job, and the new qcow2 volume to copy it into.
type BackupTarget struct {
	// SourcePool and SourceVolume are the volume of the domain's disk to
	// copy (a disk given by volume, or by its file's path).
	SourcePool, SourceVolume string
	// Pool and Name are the copy's.
	Pool, Name string
}
