//! `src/sys.rs` mirrors `include/uapi/linux/fgds.h` by hand (bindgen is
//! not among the tools this tree builds with offline, and the library is
//! built without a kernel tree). This test holds the mirror to the header
//! itself, as the C compiler sees it: struct sizes, field offsets, the
//! ioctl numbers from the kernel's own _IOR/_IOW/_IOWR, and the constants.

mod cdefs;

use fgds::sys::*;

#[test]
fn uapi_mirror_matches_the_header() {
    let (body, mut want) = c_layout! {
        fgds_version => FgdsVersion { version, pad, features, page_size, max_size }
        fgds_reg_buffer => FgdsRegBuffer { dmabuf_fd, flags, offset, size, cookie, reserved }
        fgds_unreg_buffer => FgdsUnregBuffer { cookie, reserved }
        fgds_buffer_info => FgdsBufferInfo { cookie, size, bar_offset, bar, state, reserved }
    };
    let (cbody, cwant) = c_consts!(
        FGDS_API_VERSION = FGDS_API_VERSION,
        FGDS_FEATURE_QUERY = FGDS_FEATURE_QUERY,
        FGDS_FEATURE_REVOKE = FGDS_FEATURE_REVOKE,
        FGDS_BUFFER_REVOKED = FGDS_BUFFER_REVOKED,
        FGDS_IOCTL_BASE = FGDS_IOCTL_BASE,
        FGDS_IOCTL_VERSION = FGDS_IOCTL_VERSION,
        FGDS_IOCTL_REG_BUFFER = FGDS_IOCTL_REG_BUFFER,
        FGDS_IOCTL_UNREG_BUFFER = FGDS_IOCTL_UNREG_BUFFER,
        FGDS_IOCTL_QUERY_BUFFER = FGDS_IOCTL_QUERY_BUFFER,
    );
    want += &cwant;
    let uapi = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../include/uapi");
    if let Some(got) = cdefs::run_c(&[uapi], &["<linux/fgds.h>"], &(body + &cbody)) {
        assert_eq!(got, want);
    }
}
