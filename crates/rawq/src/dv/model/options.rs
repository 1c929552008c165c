//! The one conversion of rawq's options (the mlx5 receive vocabulary and the software
//! device's options, `crate::options`) into the device crate's own types (`rawq-model`, which
//! imports nothing from rawq).

use crate::options::dv::{MiniCqeFormat, Striding};
use crate::options::model::{ModelWire, NetdevPath};

// ---- The one place rawq's options (the mlx5 receive vocabulary of `crate::dv::options` and
// the options above) become the device crate's own types (`rawq_model`): the same values, kept
// apart so that neither rawq's DV driver nor its configuration imports the model.

pub(crate) fn striding_of(s: Striding) -> rawq_model::Striding {
    rawq_model::Striding {
        log_num_strides: s.log_num_strides,
        log_stride_size: s.log_stride_size,
        two_byte_shift: s.two_byte_shift,
    }
}

pub(crate) fn mini_cqe_of(f: MiniCqeFormat) -> rawq_model::MiniCqeFormat {
    match f {
        MiniCqeFormat::Hash => rawq_model::MiniCqeFormat::Hash,
        MiniCqeFormat::CsumStrideIdx => rawq_model::MiniCqeFormat::CsumStrideIdx,
    }
}

pub(crate) fn wire_of(w: &ModelWire) -> rawq_model::ModelWire {
    match w {
        ModelWire::Loopback => rawq_model::ModelWire::Loopback,
        ModelWire::Sink => rawq_model::ModelWire::Sink,
        ModelWire::Bridge { ifname } => rawq_model::ModelWire::Bridge {
            ifname: ifname.clone(),
        },
    }
}

pub(crate) fn netdev_of(n: &NetdevPath) -> rawq_model::NetdevPath {
    match n {
        NetdevPath::Tap { ifname } => rawq_model::NetdevPath::Tap {
            ifname: ifname.clone(),
        },
    }
}
