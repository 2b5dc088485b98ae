// SPDX-License-Identifier: GPL-2.0
/*
 * The NVIDIA stand-in of Kohaku's nested test host: a kernel module named
 * nvidia that declares a driver version, so /sys/module/nvidia/version reads
 * as it does on a host running NVIDIA's driver, and that drives the GPU
 * stand-in (QEMU's VGA, 1234:1111) as nvidia drives a card. kohaku_gpu_binding
 * reads that version before it moves the card to vfio-pci, and gives the card
 * back to this driver afterwards.
 *
 * nestedhost.sh builds it for L1's kernel when it builds L1's image, with
 * NV_VERSION set by the image recipe. It touches no hardware beyond enabling
 * and disabling the PCI function.
 */
#include <linux/module.h>
#include <linux/pci.h>

#ifndef NV_VERSION
#error "build with NV_VERSION defined, e.g. ccflags-y := -DNV_VERSION=\\\"550.54.15\\\""
#endif

static const struct pci_device_id kohaku_nv_ids[] = {
	{ PCI_DEVICE(0x1234, 0x1111) }, /* QEMU's VGA: the GPU stand-in */
	{ }
};
MODULE_DEVICE_TABLE(pci, kohaku_nv_ids);

static int kohaku_nv_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int err = pci_enable_device(pdev);

	if (err)
		return err;
	dev_info(&pdev->dev, "Kohaku NVIDIA stand-in %s bound\n", NV_VERSION);
	return 0;
}

static void kohaku_nv_remove(struct pci_dev *pdev)
{
	pci_disable_device(pdev);
	dev_info(&pdev->dev, "Kohaku NVIDIA stand-in released\n");
}

static struct pci_driver kohaku_nv_driver = {
	.name = "nvidia",
	.id_table = kohaku_nv_ids,
	.probe = kohaku_nv_probe,
	.remove = kohaku_nv_remove,
};
module_pci_driver(kohaku_nv_driver);

MODULE_LICENSE("GPL");
MODULE_VERSION(NV_VERSION);
MODULE_DESCRIPTION("Kohaku test stand-in for NVIDIA's kernel driver");
