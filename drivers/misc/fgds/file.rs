// SPDX-License-Identifier: GPL-2.0

//! An open `/dev/fgdsN`: the UAPI (ioctls, `mmap()`, fdinfo) and the file's registrations.

use core::sync::atomic::Ordering;
use kernel::{
    dma::DataDirection,
    dma_buf::{
        DmaBuf,
        DynamicAttachment,
        ResvUsage, //
    },
    fs::File,
    ioctl::{
        _IOR,
        _IOW,
        _IOWR, //
    },
    miscdevice::{
        MiscDevice,
        MiscDeviceRegistration,
        RegisteredData, //
    },
    mm::virt::{
        flags as vm_flags,
        VmaNew, //
    },
    new_mutex,
    page::{
        PAGE_SHIFT,
        PAGE_SIZE, //
    },
    prelude::*,
    rbtree::RBTree,
    seq_file::SeqFile,
    seq_print,
    sync::{
        Arc,
        Mutex, //
    },
    transmute::{
        AsBytes,
        FromBytes, //
    },
    uaccess::{
        UserPtr,
        UserSlice, //
    },
    uapi, //
};

use crate::{
    buffer::{
        extents,
        map_for_peer,
        pin_error,
        BufState,
        Buffer, //
    },
    gpu::{
        Drain,
        Gpu,
        LiveBuffer,
        NodeGpu,
        PAGES_PER_CHUNK, //
    },
    module_parameters,
    page_aligned,
    THIS_MODULE, //
};

/// Largest registration (also reported by `FGDS_IOCTL_VERSION`).
const MAX_BUFFER_SIZE: u64 = 1 << 40;
const IOCTL_VERSION: u32 = _IOR::<Version>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_VERSION,
);
const IOCTL_REG_BUFFER: u32 = _IOWR::<RegBuffer>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_REG_BUFFER,
);
const IOCTL_UNREG_BUFFER: u32 = _IOW::<UnregBuffer>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_UNREG_BUFFER,
);
const IOCTL_QUERY_BUFFER: u32 = _IOWR::<BufferInfo>(
    uapi::FGDS_IOCTL_BASE,
    uapi::fgds_ioctl_nr_FGDS_IOCTL_NR_QUERY_BUFFER,
);

macro_rules! uapi_struct {
    ($name:ident, $raw:ty) => {
        #[repr(transparent)]
        struct $name($raw);

        // SAFETY: A UAPI structure: plain integers and integer arrays, no padding.
        unsafe impl FromBytes for $name {}
        // SAFETY: As above.
        unsafe impl AsBytes for $name {}
    };
}

uapi_struct!(Version, uapi::fgds_version);
uapi_struct!(RegBuffer, uapi::fgds_reg_buffer);
uapi_struct!(UnregBuffer, uapi::fgds_unreg_buffer);
uapi_struct!(BufferInfo, uapi::fgds_buffer_info);

/// An open file's registrations, by cookie.
struct FileBuffers {
    tree: RBTree<u64, Arc<Buffer>>,
    /// Entries in `tree`, at most [`max_registrations`].
    count: usize,
}

/// Most registrations one open file holds (`ENOSPC` past it): the module parameter
/// `max_registrations`, 65536 by default. Each registration costs a few hundred bytes of kernel
/// memory besides its struct pages, all charged to the caller's memory cgroup.
fn max_registrations() -> usize {
    *module_parameters::max_registrations.value()
}

impl FileBuffers {
    /// Whether the file holds as many registrations as it may.
    fn full(&self) -> bool {
        self.count >= max_registrations()
    }

    fn insert(&mut self, buf: &Arc<Buffer>) -> Result {
        if self.full() {
            return Err(ENOSPC);
        }
        self.tree
            .try_create_and_insert(buf.cookie, buf.clone(), GFP_KERNEL_ACCOUNT)?;
        self.count += 1;
        Ok(())
    }

    fn remove(&mut self, cookie: u64) -> Option<Arc<Buffer>> {
        let buf = self.tree.remove(&cookie);
        if buf.is_some() {
            self.count -= 1;
        }
        buf
    }
}

/// The state of an open `/dev/fgdsN`.
#[pin_data(PinnedDrop)]
pub(crate) struct FgdsFile {
    /// The node's data while the node exists: REG_BUFFER holds a guard of it.
    node: Arc<RegisteredData<FgdsFile>>,
    /// The node's GPU, for the accounting of registrations after the node is gone.
    gpu: Arc<Gpu>,
    /// Registrations of this open file.
    #[pin]
    buffers: Mutex<FileBuffers>,
}

#[pinned_drop]
impl PinnedDrop for FgdsFile {
    fn drop(self: Pin<&mut Self>) {
        let buffers = core::mem::take(&mut self.buffers.lock().tree);
        for (_, buf) in buffers.iter() {
            buf.unregister(false);
        }
    }
}

impl FgdsFile {
    fn lookup(&self, cookie: u64) -> Result<Arc<Buffer>> {
        self.buffers.lock().tree.get(&cookie).cloned().ok_or(ENOENT)
    }

    fn version(&self, arg: usize) -> Result<isize> {
        let v = Version(uapi::fgds_version {
            version: uapi::FGDS_API_VERSION,
            pad: 0,
            features: u64::from(uapi::FGDS_FEATURE_QUERY | uapi::FGDS_FEATURE_REVOKE),
            page_size: PAGE_SIZE as u64,
            max_size: MAX_BUFFER_SIZE,
        });
        UserSlice::new(UserPtr::from_addr(arg), size_of::<Version>())
            .writer()
            .write(&v)?;
        Ok(0)
    }

    fn reg_buffer(&self, file: &File, arg: usize) -> Result<isize> {
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size_of::<RegBuffer>()).reader_writer();
        let mut req: RegBuffer = reader.read()?;
        let r = &req.0;
        if r.flags != 0 || r.reserved != [0; 2] || r.cookie != 0 {
            return Err(EINVAL);
        }
        if r.size == 0
            || !page_aligned(r.offset)
            || !page_aligned(r.size)
            || r.size > MAX_BUFFER_SIZE
        {
            return Err(EINVAL);
        }
        // Checked again when the registration is listed on the file.
        if self.buffers.lock().full() {
            return Err(ENOSPC);
        }
        let dmabuf = DmaBuf::get(r.dmabuf_fd)?;
        let end = r.offset.checked_add(r.size).ok_or(ERANGE)?;
        if end > dmabuf.size() as u64 {
            return Err(ERANGE);
        }
        // `ENODEV` at once on a node that is gone; the guard that making pages needs is taken
        // later, around that alone.
        drop(self.node.access()?);
        let cookie = {
            let mut gs = self.gpu.state.lock();
            gs.last_id += 1;
            gs.last_id << PAGE_SHIFT
        };
        let drain = Arc::pin_init(Drain::new(), GFP_KERNEL_ACCOUNT)?;
        let buf = Arc::pin_init(
            try_pin_init!(Buffer {
                gpu: self.gpu.clone(),
                _live: LiveBuffer::new(&self.gpu),
                cookie,
                size: r.size,
                mapping: file.mapping(),
                attach <- new_mutex!(None),
                state <- new_mutex!(BufState {
                    dead: false,
                    bias: true,
                    revoked: false,
                    bar: 0,
                    bar_offset: 0,
                    extents: KVec::new(),
                    chunks: KVec::new(),
                    pages: KVVec::new(),
                }),
                drain,
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        let attach = DynamicAttachment::new(
            &dmabuf,
            self.gpu.offer.pci_dev().as_ref(),
            buf.clone(),
            DataDirection::Bidirectional,
        )?;
        if !attach.peer2peer() {
            return Err(EOPNOTSUPP);
        }
        let ext = {
            let mut locked = attach.lock();
            // Pinned for the registration's life, or not registered: the struct pages describe
            // one place in the BAR, and fgds cannot follow a move without waiting for I/O in the
            // exporter's callback. The exporter may move the buffer to satisfy the pin (amdgpu:
            // into visible VRAM); one without pin support (static: vfio-pci, virtio-gpu,
            // NVIDIA) never moves it and succeeds.
            locked.pin().map_err(pin_error)?;
            map_for_peer(&locked)?;
            // The exporter's moves and clears of the memory come before any use of it, and so
            // does every implicitly synchronised job on it: storage both writes the registration
            // (reads of files) and reads it (writes), so its readers and writers too.
            locked.wait_fences(ResvUsage::Read)?;
            // `EOPNOTSUPP`: neither the exporter nor the dma-buf core describes the memory as
            // PCI MMIO (system memory, as where xe pins; a driver without `get_phys()` over
            // memory its owner made no P2PDMA pages of); `ENODEV`: revoked meanwhile.
            let phys = locked.phys_ranges()?;
            extents(&self.gpu, &phys, r.offset, r.size)?
        };
        {
            // Every struct page this block makes is published on the GPU, or gone, before the
            // guard is dropped and with it the node's registration may be. `ENODEV` once the
            // node is going.
            let node = self.node.access()?;
            buf.claim(&node, &ext)?;
            buf.state.lock().extents = ext;
            *buf.attach.lock() = Some(attach);
            if let Err(e) = self.publish(&buf) {
                buf.unregister(false);
                return Err(e);
            }
        }
        req.0.cookie = cookie;
        if let Err(e) = writer.write(&req) {
            if let Some(buf) = self.buffers.lock().remove(cookie) {
                buf.unregister(false);
            }
            return Err(e);
        }
        Ok(0)
    }

    /// Lists a new registration on its GPU, whose removal then tears it down, and on the file.
    fn publish(&self, buf: &Arc<Buffer>) -> Result {
        self.gpu.state.lock().buffers.try_create_and_insert(
            buf.cookie,
            buf.clone(),
            GFP_KERNEL_ACCOUNT,
        )?;
        self.buffers.lock().insert(buf)
    }

    fn unreg_buffer(&self, arg: usize) -> Result<isize> {
        let req: UnregBuffer = UserSlice::new(UserPtr::from_addr(arg), size_of::<UnregBuffer>())
            .reader()
            .read()?;
        if req.0.reserved != 0 {
            return Err(EINVAL);
        }
        // Torn down before it leaves the file's table: a concurrent UNREG of the same cookie
        // waits in `unregister()` until the drain is done, then finds it gone (`ENOENT`). Either
        // way no caller returns while DMA into the buffer may be in flight.
        let buf = self.lookup(req.0.cookie)?;
        buf.unregister(false);
        match self.buffers.lock().remove(req.0.cookie) {
            Some(_) => Ok(0),
            None => Err(ENOENT),
        }
    }

    fn query_buffer(&self, arg: usize) -> Result<isize> {
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size_of::<BufferInfo>()).reader_writer();
        let mut info: BufferInfo = reader.read()?;
        if info.0.reserved != [0; 2] {
            return Err(EINVAL);
        }
        let buf = self.lookup(info.0.cookie)?;
        {
            let st = buf.state.lock();
            info.0.size = buf.size;
            info.0.bar = st.bar;
            info.0.bar_offset = st.bar_offset;
            info.0.state = if st.revoked {
                uapi::FGDS_BUFFER_REVOKED
            } else {
                0
            };
        }
        writer.write(&info)?;
        Ok(0)
    }
}

#[vtable]
impl MiscDevice for FgdsFile {
    type Ptr = Pin<KBox<Self>>;
    /// The node's GPU.
    type RegistrationData = NodeGpu;

    const OWNER: &'static ThisModule = &THIS_MODULE;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Self::Ptr> {
        KBox::try_pin_init(
            try_pin_init!(FgdsFile {
                node: misc.registered_data(),
                gpu: misc.data().0.clone(),
                buffers <- new_mutex!(FileBuffers {
                    tree: RBTree::new(),
                    count: 0,
                }),
            }),
            GFP_KERNEL,
        )
    }

    fn ioctl(me: Pin<&FgdsFile>, file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            IOCTL_VERSION => me.version(arg),
            IOCTL_REG_BUFFER => me.reg_buffer(file, arg),
            IOCTL_UNREG_BUFFER => me.unreg_buffer(arg),
            IOCTL_QUERY_BUFFER => me.query_buffer(arg),
            _ => Err(ENOTTY),
        }
    }

    fn mmap(me: Pin<&FgdsFile>, _file: &File, vma: &VmaNew) -> Result {
        let cookie = (vma.pgoff() as u64) << PAGE_SHIFT;
        let buf = me.lookup(cookie).map_err(|_| ENXIO)?;
        if vma.flags() & vm_flags::MAYSHARE == 0 {
            return Err(EINVAL);
        }
        if (vma.end() - vma.start()) as u64 != buf.size {
            return Err(EINVAL);
        }
        if vma.flags() & vm_flags::EXEC != 0 {
            return Err(EPERM);
        }
        vma.try_clear_mayexec()?;
        {
            let st = buf.state.lock();
            if st.dead {
                return Err(ENODEV);
            }
            // MMIO, never write-back: the memory type of the kernel's own mapping of the pages,
            // uncached or what the BAR's owner reserved (write-combined VRAM apertures).
            me.gpu
                .offer
                .set_user_page_prot(vma, st.extents.iter().map(|&(_, off, len)| (off, len)))?;
        }
        vma.set_dontcopy();
        vma.set_dontexpand();
        vma.set_dontdump();
        vma.set_vm_ops(buf);
        Ok(())
    }

    fn show_fdinfo(me: Pin<&FgdsFile>, m: &SeqFile, _file: &File) {
        let buffers = me.buffers.lock().count;
        let (chunks, pagemaps) = {
            let gs = me.gpu.state.lock();
            (gs.chunks.iter().count(), gs.pagemaps)
        };
        let live = me.gpu.live_buffers.load(Ordering::Relaxed);
        seq_print!(m, "fgds-buffers:\t{}\n", buffers);
        seq_print!(m, "fgds-gpu-buffers:\t{}\n", live);
        seq_print!(m, "fgds-gpu-chunks:\t{}\n", chunks);
        seq_print!(m, "fgds-gpu-pagemaps:\t{}\n", pagemaps);
        seq_print!(m, "fgds-gpu-pages:\t{}\n", chunks * PAGES_PER_CHUNK);
    }
}
