//! The I/O threads: `FGDS_THREADS` workers, started the first time one is
//! needed, that run jobs handed to them (asynchronous and batch requests,
//! the parts of a split call, stream-ordered requests). Each has its own
//! io_uring (the engine keeps one a thread).

use crate::error::{Error, Result};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// Work for an I/O thread.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

fn pool() -> Result<&'static Mutex<Sender<Job>>> {
    static POOL: OnceLock<std::result::Result<Mutex<Sender<Job>>, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let n = crate::env::env().threads;
        for i in 0..n {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("fgds-io-{i}"))
                .spawn(move || loop {
                    let job = {
                        let g = rx.lock().unwrap_or_else(|p| p.into_inner());
                        g.recv()
                    };
                    match job {
                        Ok(j) => j(),
                        Err(_) => return,
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(Mutex::new(tx))
    })
    .as_ref()
    .map_err(|e| Error::InvalidArgument(format!("cannot start I/O threads: {e}")))
}

/// Starts the I/O threads if they are not running.
pub(crate) fn start_pool() -> Result<()> {
    pool().map(|_| ())
}

/// Hands `job` to an I/O thread; gives it back when there is none.
pub(crate) fn spawn_job(job: Job) -> std::result::Result<(), Job> {
    let Ok(tx) = pool() else {
        return Err(job);
    };
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|e| e.0)
}

/// Hands `job` to an I/O thread; an error when there is none.
pub(crate) fn spawn(job: Job) -> Result<()> {
    let tx = pool()?;
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|_| Error::InvalidArgument("I/O threads are gone".into()))
}
