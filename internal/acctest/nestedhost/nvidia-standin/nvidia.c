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
 * It also stands in for NVIDIA's vGPU manager on an SR-IOV GPU (Ada,
 * Hopper): every virtual function of the SR-IOV stand-in (QEMU's NVMe
 * controller, 1b36:0010, whose PF stays on L1's nvme driver) gets the
 * directory nvidia/ that NVIDIA's driver gives a GPU's VFs, with
 *   creatable_vgpu_types  (read) "ID    : vGPU Name", then "<id> : <name>"
 *                         for each type the VF can take now;
 *   current_vgpu_type     (read/write) the VF's type, 0 for none; writing a
 *                         creatable id sets it, 0 clears it.
 * The PF is a time-sliced 48 GB L40S-like GPU: one type at a time for all
 * its VFs, as many of them as its framebuffer holds; a VF with a type lists
 * nothing. A PCI bus notifier gives VFs created later (sriov_numvfs) the
 * files and takes them away again when the VFs go.
 *
 * nestedhost.sh builds it for L1's kernel when it builds L1's image, with
 * NV_VERSION set by the image recipe. It touches no hardware beyond enabling
 * and disabling the PCI function.
 */
#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/kobject.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
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

/* ------------------------------------------------ SR-IOV vGPU stand-in */

#define KOHAKU_SRIOV_VENDOR 0x1b36 /* QEMU's NVMe controller: the SR-IOV PF */
#define KOHAKU_SRIOV_DEVICE 0x0010
#define KOHAKU_SRIOV_FB_GB 48 /* the PF's framebuffer, as an L40S's */

struct kohaku_vgpu_type {
	unsigned int id;
	const char *name;
	unsigned int fb_gb;
};

/* time-sliced Q-series types of an L40S-like 48 GB GPU */
static const struct kohaku_vgpu_type kohaku_vgpu_types[] = {
	{ 1155, "NVIDIA L40S-12Q", 12 },
	{ 1156, "NVIDIA L40S-24Q", 24 },
	{ 1157, "NVIDIA L40S-48Q", 48 },
};

/* one per VF of the stand-in PF: its nvidia/ directory and its type */
struct kohaku_vf {
	struct list_head node;
	struct pci_dev *pdev; /* a reference, held while on the list */
	struct kobject *kobj; /* <VF>/nvidia */
	unsigned int type;    /* 0: none */
};

/* what the SR-IOV stand-in's PF is: nestedhost.sh up checks this is here */
static char *sriov_standin_pf = "1b36:0010";
module_param(sriov_standin_pf, charp, 0444);
MODULE_PARM_DESC(sriov_standin_pf, "vendor:device of the PF whose VFs get NVIDIA's vGPU files (read-only)");

static LIST_HEAD(kohaku_vfs);
static DEFINE_MUTEX(kohaku_vfs_lock); /* the list and every type */

static bool kohaku_is_standin_vf(struct pci_dev *pdev)
{
	struct pci_dev *pf = pci_physfn(pdev);

	return pdev->is_virtfn && pf->vendor == KOHAKU_SRIOV_VENDOR && pf->device == KOHAKU_SRIOV_DEVICE;
}

/* under kohaku_vfs_lock */
static struct kohaku_vf *kohaku_vf_find(struct pci_dev *pdev)
{
	struct kohaku_vf *vf;

	list_for_each_entry(vf, &kohaku_vfs, node)
		if (vf->pdev == pdev)
			return vf;
	return NULL;
}

/* the VF whose nvidia/ directory kobj is; under kohaku_vfs_lock */
static struct kohaku_vf *kohaku_vf_of_kobj(struct kobject *kobj)
{
	struct kohaku_vf *vf;

	list_for_each_entry(vf, &kohaku_vfs, node)
		if (vf->kobj == kobj)
			return vf;
	return NULL;
}

/*
 * The type the VFs of pf share (0: none yet) and how many of them have it;
 * under kohaku_vfs_lock.
 */
static unsigned int kohaku_pf_type(struct pci_dev *pf, unsigned int *used)
{
	struct kohaku_vf *vf;
	unsigned int type = 0;

	*used = 0;
	list_for_each_entry(vf, &kohaku_vfs, node) {
		if (pci_physfn(vf->pdev) != pf || !vf->type)
			continue;
		type = vf->type;
		(*used)++;
	}
	return type;
}

/* whether vf can take type t now; under kohaku_vfs_lock */
static bool kohaku_creatable(struct kohaku_vf *vf, const struct kohaku_vgpu_type *t)
{
	unsigned int used, active;

	if (vf->type)
		return false;
	active = kohaku_pf_type(pci_physfn(vf->pdev), &used);
	if (active && active != t->id)
		return false;
	return (used + 1) * t->fb_gb <= KOHAKU_SRIOV_FB_GB;
}

static ssize_t creatable_vgpu_types_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	struct kohaku_vf *vf;
	int i, n;

	n = sysfs_emit(buf, "ID    : vGPU Name\n");
	mutex_lock(&kohaku_vfs_lock);
	vf = kohaku_vf_of_kobj(kobj);
	for (i = 0; vf && i < ARRAY_SIZE(kohaku_vgpu_types); i++)
		if (kohaku_creatable(vf, &kohaku_vgpu_types[i]))
			n += sysfs_emit_at(buf, n, "%-5u : %s\n", kohaku_vgpu_types[i].id, kohaku_vgpu_types[i].name);
	mutex_unlock(&kohaku_vfs_lock);
	return n;
}

static ssize_t current_vgpu_type_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	struct kohaku_vf *vf;
	unsigned int type = 0;

	mutex_lock(&kohaku_vfs_lock);
	vf = kohaku_vf_of_kobj(kobj);
	if (vf)
		type = vf->type;
	mutex_unlock(&kohaku_vfs_lock);
	return sysfs_emit(buf, "%u\n", type);
}

static ssize_t current_vgpu_type_store(struct kobject *kobj, struct kobj_attribute *attr, const char *buf, size_t count)
{
	struct kohaku_vf *vf;
	unsigned int id;
	int i, err;

	err = kstrtouint(buf, 0, &id);
	if (err)
		return -EINVAL;
	mutex_lock(&kohaku_vfs_lock);
	vf = kohaku_vf_of_kobj(kobj);
	if (!vf) {
		err = -ENODEV;
	} else if (id == 0) {
		if (vf->type)
			pr_info("nvidia-standin: %s vgpu type %u cleared\n", pci_name(vf->pdev), vf->type);
		vf->type = 0;
	} else if (vf->type) {
		err = -EBUSY;
	} else {
		err = -EINVAL;
		for (i = 0; i < ARRAY_SIZE(kohaku_vgpu_types); i++) {
			if (kohaku_vgpu_types[i].id != id || !kohaku_creatable(vf, &kohaku_vgpu_types[i]))
				continue;
			vf->type = id;
			pr_info("nvidia-standin: %s vgpu type set to %u (%s)\n", pci_name(vf->pdev), id, kohaku_vgpu_types[i].name);
			err = 0;
		}
	}
	mutex_unlock(&kohaku_vfs_lock);
	return err ? err : count;
}

static struct kobj_attribute kohaku_attr_creatable = __ATTR_RO(creatable_vgpu_types);
static struct kobj_attribute kohaku_attr_current = __ATTR_RW(current_vgpu_type);
static struct attribute *kohaku_vf_attrs[] = {
	&kohaku_attr_creatable.attr,
	&kohaku_attr_current.attr,
	NULL,
};
static const struct attribute_group kohaku_vf_group = { .attrs = kohaku_vf_attrs };

static void kohaku_vf_add(struct pci_dev *pdev)
{
	struct kohaku_vf *vf;
	bool dup;

	if (!kohaku_is_standin_vf(pdev))
		return;
	vf = kzalloc(sizeof(*vf), GFP_KERNEL);
	if (!vf)
		return;
	/* the directory is made outside the lock: its readers take the lock */
	vf->kobj = kobject_create_and_add("nvidia", &pdev->dev.kobj);
	if (!vf->kobj) {
		kfree(vf);
		return;
	}
	if (sysfs_create_group(vf->kobj, &kohaku_vf_group)) {
		kobject_put(vf->kobj);
		kfree(vf);
		return;
	}
	vf->pdev = pci_dev_get(pdev);
	mutex_lock(&kohaku_vfs_lock);
	dup = kohaku_vf_find(pdev) != NULL;
	if (!dup)
		list_add_tail(&vf->node, &kohaku_vfs);
	mutex_unlock(&kohaku_vfs_lock);
	if (dup) { /* the notifier and the walk at load both found it */
		kobject_put(vf->kobj);
		pci_dev_put(vf->pdev);
		kfree(vf);
		return;
	}
	dev_info(&pdev->dev, "nvidia-standin: vGPU files for VF of %s\n", pci_name(pci_physfn(pdev)));
}

static void kohaku_vf_free(struct kohaku_vf *vf)
{
	/* removing the directory waits for its readers: never under the lock */
	kobject_put(vf->kobj);
	pci_dev_put(vf->pdev);
	kfree(vf);
}

static void kohaku_vf_del(struct pci_dev *pdev)
{
	struct kohaku_vf *vf;

	mutex_lock(&kohaku_vfs_lock);
	vf = kohaku_vf_find(pdev);
	if (vf)
		list_del(&vf->node);
	mutex_unlock(&kohaku_vfs_lock);
	if (vf)
		kohaku_vf_free(vf);
}

static int kohaku_pci_notify(struct notifier_block *nb, unsigned long action, void *data)
{
	struct pci_dev *pdev = to_pci_dev(data);

	if (action == BUS_NOTIFY_ADD_DEVICE)
		kohaku_vf_add(pdev);
	else if (action == BUS_NOTIFY_DEL_DEVICE)
		kohaku_vf_del(pdev);
	return NOTIFY_DONE;
}

static struct notifier_block kohaku_pci_nb = { .notifier_call = kohaku_pci_notify };

static void kohaku_vfs_remove_all(void)
{
	struct kohaku_vf *vf, *tmp;
	LIST_HEAD(gone);

	mutex_lock(&kohaku_vfs_lock);
	list_splice_init(&kohaku_vfs, &gone);
	mutex_unlock(&kohaku_vfs_lock);
	list_for_each_entry_safe(vf, tmp, &gone, node) {
		list_del(&vf->node);
		kohaku_vf_free(vf);
	}
}

static int __init kohaku_nv_init(void)
{
	struct pci_dev *pdev = NULL;
	int err;

	err = bus_register_notifier(&pci_bus_type, &kohaku_pci_nb);
	if (err)
		return err;
	/* VFs that exist already; the notifier has those made from now on */
	for_each_pci_dev(pdev)
		if (kohaku_is_standin_vf(pdev)) {
			bool known;

			mutex_lock(&kohaku_vfs_lock);
			known = kohaku_vf_find(pdev) != NULL;
			mutex_unlock(&kohaku_vfs_lock);
			if (!known)
				kohaku_vf_add(pdev);
		}
	err = pci_register_driver(&kohaku_nv_driver);
	if (err) {
		bus_unregister_notifier(&pci_bus_type, &kohaku_pci_nb);
		kohaku_vfs_remove_all();
	}
	return err;
}

static void __exit kohaku_nv_exit(void)
{
	pci_unregister_driver(&kohaku_nv_driver);
	bus_unregister_notifier(&pci_bus_type, &kohaku_pci_nb);
	kohaku_vfs_remove_all();
}

module_init(kohaku_nv_init);
module_exit(kohaku_nv_exit);

MODULE_LICENSE("GPL");
MODULE_VERSION(NV_VERSION);
MODULE_DESCRIPTION("Kohaku test stand-in for NVIDIA's kernel driver");
