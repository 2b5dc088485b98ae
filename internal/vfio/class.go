package vfio

// Class names as lspci prints them (pci.ids), by base class and subclass.
var subclassNames = map[uint32]string{
	0x0000: "Non-VGA unclassified device",
	0x0001: "VGA compatible unclassified device",
	0x0100: "SCSI storage controller",
	0x0101: "IDE interface",
	0x0104: "RAID bus controller",
	0x0105: "ATA controller",
	0x0106: "SATA controller",
	0x0107: "Serial Attached SCSI controller",
	0x0108: "Non-Volatile memory controller",
	0x0200: "Ethernet controller",
	0x0207: "Infiniband controller",
	0x0280: "Network controller",
	0x0300: "VGA compatible controller",
	0x0301: "XGA compatible controller",
	0x0302: "3D controller",
	0x0380: "Display controller",
	0x0400: "Multimedia video controller",
	0x0401: "Multimedia audio controller",
	0x0403: "Audio device",
	0x0500: "RAM memory",
	0x0600: "Host bridge",
	0x0601: "ISA bridge",
	0x0604: "PCI bridge",
	0x0680: "Bridge",
	0x0700: "Serial controller",
	0x0806: "IOMMU",
	0x0880: "System peripheral",
	0x0c03: "USB controller",
	0x0c05: "SMBus",
	0x0c80: "Serial bus controller",
	0x1200: "Processing accelerators",
}

var baseClassNames = map[uint32]string{
	0x00: "Unclassified device",
	0x01: "Mass storage controller",
	0x02: "Network controller",
	0x03: "Display controller",
	0x04: "Multimedia controller",
	0x05: "Memory controller",
	0x06: "Bridge",
	0x07: "Communication controller",
	0x08: "Generic system peripheral",
	0x09: "Input device controller",
	0x0a: "Docking station",
	0x0b: "Processor",
	0x0c: "Serial bus controller",
	0x0d: "Wireless controller",
	0x0e: "Intelligent controller",
	0x0f: "Satellite communications controller",
	0x10: "Encryption controller",
	0x11: "Signal processing controller",
	0x12: "Processing accelerators",
	0x13: "Non-Essential Instrumentation",
	0x40: "Coprocessor",
	0xff: "Unassigned class",
}

// ClassName names a 24-bit PCI class code the way lspci does, e.g.
// 0x030000 "VGA compatible controller", 0x040300 "Audio device".
func ClassName(class uint32) string {
	if n, ok := subclassNames[class>>8]; ok {
		return n
	}
	if n, ok := baseClassNames[class>>16]; ok {
		return n
	}
	return "Unknown class"
}

// IsDisplay reports a display controller (base class 03: VGA, 3D, other).
func IsDisplay(class uint32) bool { return class>>16 == 0x03 }

// riskyBaseClasses are classes whose devices a host usually cannot lose:
// its disks, its network, its PCI topology. A group holding one is refused
// unless the caller allows other classes.
var riskyBaseClasses = map[uint32]string{
	0x01: "storage",
	0x02: "network",
	0x06: "bridge",
}

// riskKind names why a class is risky ("storage", "network", "bridge"), or "".
func riskKind(class uint32) string { return riskyBaseClasses[class>>16] }
