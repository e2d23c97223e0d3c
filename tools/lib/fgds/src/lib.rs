//! fgds: O_DIRECT and io_uring I/O between files and GPU (or host) memory.
//!
//! See `tools/lib/fgds/README.md` for an overview.

mod backend;
pub mod batch;
pub mod buffer;
pub mod capi;
pub mod config;
pub mod device;
pub mod engine;
pub mod env;
pub mod error;
pub mod file;
pub mod gpu;
pub mod gpucache;
mod pool;
pub mod report;
pub mod stats;
pub mod stream;
pub mod sys;

pub use batch::{Batch, Event, IoHandle, IoParams, IoTarget, OwnedSegment, Status};
pub use buffer::{Buffer, BufferKind};
pub use config::{BounceRead, Config, FGDS_BATCH_IOV_MAX, FGDS_IOV_MAX};
pub use device::{list_devices, Device, DeviceInfo};
pub use engine::{read, readv, write, writev, Op, Segment};
pub use error::{Error, Result};
pub use file::FileHandle;
pub use stats::{FallbackCause, Fallbacks, Stats};
pub use stream::{LateArgs, Notify, StreamDone, StreamRequest};
