//! [`DeviceSpec`]: which device runs a phase (`[devices] prefill` / `decode`).

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The forms a device may be written in, for error messages.
pub const DEVICE_FORMS: &str = "\"auto\", \"cpu\", \"vulkan:N\", \"cuda:N\" or \"hip:N\"";

/// A device that runs one phase of inference.
///
/// Written in the config as `"auto"`, `"cpu"`, `"vulkan:N"`, `"cuda:N"` or `"hip:N"`, where `N` is the
/// index of the device among those its API lists (`vulkan`, `cuda` and `hip` alone mean index 0).
/// Names are case-insensitive; [`Display`](fmt::Display) writes the canonical lower-case form with the
/// index, which [`FromStr`] reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceSpec {
    /// Let strata-rt pick at start-up: the best device found for the phase (see the server's docs).
    #[default]
    Auto,
    /// The CPU (host memory, SIMD kernels). Always available.
    Cpu,
    /// A Vulkan physical device, by index in enumeration order.
    Vulkan(u32),
    /// A CUDA device, by CUDA ordinal.
    Cuda(u32),
    /// A HIP (ROCm) device, by HIP ordinal.
    Hip(u32),
}

impl DeviceSpec {
    /// The API's name: `auto`, `cpu`, `vulkan`, `cuda` or `hip`.
    pub fn kind(&self) -> &'static str {
        match self {
            DeviceSpec::Auto => "auto",
            DeviceSpec::Cpu => "cpu",
            DeviceSpec::Vulkan(_) => "vulkan",
            DeviceSpec::Cuda(_) => "cuda",
            DeviceSpec::Hip(_) => "hip",
        }
    }

    /// The device index, for the APIs that have one.
    pub fn index(&self) -> Option<u32> {
        match self {
            DeviceSpec::Vulkan(i) | DeviceSpec::Cuda(i) | DeviceSpec::Hip(i) => Some(*i),
            DeviceSpec::Auto | DeviceSpec::Cpu => None,
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index() {
            Some(i) => write!(f, "{}:{i}", self.kind()),
            None => f.write_str(self.kind()),
        }
    }
}

/// Why a string is not a [`DeviceSpec`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device {input:?}: expected {DEVICE_FORMS}{hint}")]
pub struct ParseDeviceError {
    input: String,
    hint: &'static str,
}

impl FromStr for DeviceSpec {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |hint: &'static str| ParseDeviceError {
            input: s.to_owned(),
            hint,
        };
        let lower = s.trim().to_ascii_lowercase();
        let (name, index) = match lower.split_once(':') {
            Some((name, idx)) => {
                let idx = idx
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| err(" (the index after ':' is a non-negative integer)"))?;
                (name.trim(), Some(idx))
            }
            None => (lower.as_str(), None),
        };
        match (name, index) {
            ("auto", None) => Ok(DeviceSpec::Auto),
            ("cpu", None) => Ok(DeviceSpec::Cpu),
            ("auto" | "cpu", Some(_)) => Err(err(" (`auto` and `cpu` take no index)")),
            ("vulkan", i) => Ok(DeviceSpec::Vulkan(i.unwrap_or(0))),
            ("cuda", i) => Ok(DeviceSpec::Cuda(i.unwrap_or(0))),
            ("hip" | "rocm", i) => Ok(DeviceSpec::Hip(i.unwrap_or(0))),
            _ => Err(err("")),
        }
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DeviceSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a device: {DEVICE_FORMS}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DeviceSpec, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!("auto".parse(), Ok(DeviceSpec::Auto));
        assert_eq!("CPU".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("vulkan:1".parse(), Ok(DeviceSpec::Vulkan(1)));
        assert_eq!("vulkan".parse(), Ok(DeviceSpec::Vulkan(0)));
        assert_eq!("cuda:0".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("hip:2".parse(), Ok(DeviceSpec::Hip(2)));
        assert_eq!("rocm:3".parse(), Ok(DeviceSpec::Hip(3)));
    }

    #[test]
    fn display_round_trips() {
        for d in [
            DeviceSpec::Auto,
            DeviceSpec::Cpu,
            DeviceSpec::Vulkan(0),
            DeviceSpec::Cuda(7),
            DeviceSpec::Hip(1),
        ] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
        assert_eq!(DeviceSpec::Vulkan(0).to_string(), "vulkan:0");
    }

    #[test]
    fn refuses_bad_forms() {
        for bad in ["gpu", "vulkan:x", "cuda:-1", "cpu:0", "", "metal:0"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains("vulkan:N"), "{bad}: {e}");
        }
    }
}
