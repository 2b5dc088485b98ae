// Package sriov reads and sets SR-IOV vGPUs: the virtual functions (VFs) a
// GPU's host driver enables, the vGPU types its vendor's sysfs offers on
// each VF (NVIDIA's nvidia/creatable_vgpu_types and current_vgpu_type, on
// Ada, Hopper and later cards), and the choice of a VF for a type under
// the rule that a time-sliced GPU runs one type at a time.
//
// It opens no connection and no file: libvirt's node devices say which
// functions are VFs of which GPU (internal/vfio), and the host's sysfs
// files come through vfio.HostFiles. Writes (sriov_numvfs,
// current_vgpu_type) go through the Writer interface, which the host
// connection implements over local and SSH connections only.
package sriov
