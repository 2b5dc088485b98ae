// SPDX-License-Identifier: GPL-2.0
/*
 * The NVIDIA stand-in of Kohaku's nested test host: a kernel module named
 * nvidia that declares a driver version, so /sys/module/nvidia/version reads
 * as it does on a host running NVIDIA's driver, and that drives the GPU
 * stand-in (QEMU's VGA, 1234:1111) as nvidia drives a card. kohaku_gpu_binding
 * reads that version before it moves the card to vfio-pci, and gives the card
 * back to this driver afterwards.
 *
 * Like NVIDIA's driver it gives each card a device node, /dev/nvidia0 for
 * the first (a misc device here, so devtmpfs makes the node), and its remove
 * waits while a process has that node open: an unbind of a card in use
 * hangs until the last holder closes it, as nvidia's does ("Attempting to
 * remove device with non-zero usage count"). Unlike nvidia's, the wait gives
 * up after ten minutes, so a test that leaves a holder behind cannot wedge
 * L1's libvirtd for ever.
 *
 * nestedhost.sh builds it for L1's kernel when it builds L1's image, with
 * NV_VERSION set by the image recipe. It touches no hardware beyond enabling
 * and disabling the PCI function.
 */
#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/wait.h>

#ifndef NV_VERSION
#error "build with NV_VERSION defined, e.g. ccflags-y := -DNV_VERSION=\\\"550.54.15\\\""
#endif

#define KOHAKU_NV_REMOVE_WAIT (600 * HZ)

struct kohaku_nv {
	struct miscdevice misc;
	char name[16];
	int minor;
	atomic_t opens;
	wait_queue_head_t released;
};

static DEFINE_IDA(kohaku_nv_minors);

static const struct pci_device_id kohaku_nv_ids[] = {
	{ PCI_DEVICE(0x1234, 0x1111) }, /* QEMU's VGA: the GPU stand-in */
	{ }
};
MODULE_DEVICE_TABLE(pci, kohaku_nv_ids);

static int kohaku_nv_open(struct inode *inode, struct file *file)
{
	/* misc_open has set private_data to our miscdevice */
	struct kohaku_nv *nv = container_of(file->private_data, struct kohaku_nv, misc);

	atomic_inc(&nv->opens);
	file->private_data = nv;
	return 0;
}

static int kohaku_nv_release(struct inode *inode, struct file *file)
{
	struct kohaku_nv *nv = file->private_data;

	if (atomic_dec_and_test(&nv->opens))
		wake_up(&nv->released);
	return 0;
}

static const struct file_operations kohaku_nv_fops = {
	.owner = THIS_MODULE,
	.open = kohaku_nv_open,
	.release = kohaku_nv_release,
	.llseek = noop_llseek,
};

static int kohaku_nv_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct kohaku_nv *nv;
	int err = pci_enable_device(pdev);

	if (err)
		return err;
	nv = kzalloc(sizeof(*nv), GFP_KERNEL);
	if (!nv) {
		pci_disable_device(pdev);
		return -ENOMEM;
	}
	nv->minor = ida_alloc(&kohaku_nv_minors, GFP_KERNEL);
	if (nv->minor < 0) {
		err = nv->minor;
		kfree(nv);
		pci_disable_device(pdev);
		return err;
	}
	snprintf(nv->name, sizeof(nv->name), "nvidia%d", nv->minor);
	nv->misc.minor = MISC_DYNAMIC_MINOR;
	nv->misc.name = nv->name;
	nv->misc.fops = &kohaku_nv_fops;
	nv->misc.mode = 0666;
	atomic_set(&nv->opens, 0);
	init_waitqueue_head(&nv->released);
	err = misc_register(&nv->misc);
	if (err) {
		ida_free(&kohaku_nv_minors, nv->minor);
		kfree(nv);
		pci_disable_device(pdev);
		return err;
	}
	pci_set_drvdata(pdev, nv);
	dev_info(&pdev->dev, "Kohaku NVIDIA stand-in %s bound, /dev/%s\n", NV_VERSION, nv->name);
	return 0;
}

static void kohaku_nv_remove(struct pci_dev *pdev)
{
	struct kohaku_nv *nv = pci_get_drvdata(pdev);
	int n = atomic_read(&nv->opens);

	if (n) {
		dev_warn(&pdev->dev, "Attempting to remove device with non-zero usage count (%d): waiting for /dev/%s to be closed\n", n, nv->name);
		if (!wait_event_timeout(nv->released, atomic_read(&nv->opens) == 0, KOHAKU_NV_REMOVE_WAIT))
			dev_warn(&pdev->dev, "/dev/%s still open after %d s: removed anyway\n", nv->name, KOHAKU_NV_REMOVE_WAIT / HZ);
	}
	misc_deregister(&nv->misc);
	ida_free(&kohaku_nv_minors, nv->minor);
	/* a file still open keeps pointing at nv: leak it rather than free it */
	if (atomic_read(&nv->opens) == 0)
		kfree(nv);
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
