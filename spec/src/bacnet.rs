//! The BACnet objects a `bacnet` tag source names: `TYPE:INSTANCE`, the type by its
//! BACnet name (ASHRAE 135 clause 21, `BACnetObjectType`, in lower-case kebab form) and
//! the instance a 22-bit number.

use std::fmt;

use crate::limits::BACNET_INSTANCE_MAX;

/// The object types whose `present-value` a tag reads: a number (analog), a
/// BACnetBinaryPV (binary: active = 1, inactive = 0) or an unsigned state
/// (multi-state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BacnetObjectType {
    AnalogInput,
    AnalogOutput,
    AnalogValue,
    BinaryInput,
    BinaryOutput,
    BinaryValue,
    MultiStateInput,
    MultiStateOutput,
    MultiStateValue,
}

impl BacnetObjectType {
    pub const ALL: [BacnetObjectType; 9] = [
        BacnetObjectType::AnalogInput,
        BacnetObjectType::AnalogOutput,
        BacnetObjectType::AnalogValue,
        BacnetObjectType::BinaryInput,
        BacnetObjectType::BinaryOutput,
        BacnetObjectType::BinaryValue,
        BacnetObjectType::MultiStateInput,
        BacnetObjectType::MultiStateOutput,
        BacnetObjectType::MultiStateValue,
    ];

    /// Its BACnet name, as a topology writes it.
    pub fn name(self) -> &'static str {
        match self {
            BacnetObjectType::AnalogInput => "analog-input",
            BacnetObjectType::AnalogOutput => "analog-output",
            BacnetObjectType::AnalogValue => "analog-value",
            BacnetObjectType::BinaryInput => "binary-input",
            BacnetObjectType::BinaryOutput => "binary-output",
            BacnetObjectType::BinaryValue => "binary-value",
            BacnetObjectType::MultiStateInput => "multi-state-input",
            BacnetObjectType::MultiStateOutput => "multi-state-output",
            BacnetObjectType::MultiStateValue => "multi-state-value",
        }
    }

    pub fn from_name(name: &str) -> Option<BacnetObjectType> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its number in `BACnetObjectType` (analog-input 0 … multi-state-value 19).
    pub fn code(self) -> u32 {
        match self {
            BacnetObjectType::AnalogInput => 0,
            BacnetObjectType::AnalogOutput => 1,
            BacnetObjectType::AnalogValue => 2,
            BacnetObjectType::BinaryInput => 3,
            BacnetObjectType::BinaryOutput => 4,
            BacnetObjectType::BinaryValue => 5,
            BacnetObjectType::MultiStateInput => 13,
            BacnetObjectType::MultiStateOutput => 14,
            BacnetObjectType::MultiStateValue => 19,
        }
    }

    /// A binary object: its present value is active or inactive.
    pub fn is_binary(self) -> bool {
        matches!(
            self,
            BacnetObjectType::BinaryInput
                | BacnetObjectType::BinaryOutput
                | BacnetObjectType::BinaryValue
        )
    }
}

/// Why an object is not `TYPE:INSTANCE`: the end of a sentence ("… is not
/// TYPE:INSTANCE: it has no `:INSTANCE`").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BacnetObjectError {
    #[error("it has no `:INSTANCE`")]
    NoInstance,
    #[error("`{0}` is not an object type a tag reads")]
    Type(String),
    #[error("its instance `{0}` is not a number from 0 to 4194303")]
    Instance(String),
}

/// One object of one device: `analog-input:3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacnetObject {
    pub object_type: BacnetObjectType,
    pub instance: u32,
}

impl BacnetObject {
    pub fn parse(text: &str) -> Result<BacnetObject, BacnetObjectError> {
        let (name, instance) = text.split_once(':').ok_or(BacnetObjectError::NoInstance)?;
        let object_type = BacnetObjectType::from_name(name)
            .ok_or_else(|| BacnetObjectError::Type(name.to_owned()))?;
        let instance = instance
            .parse::<u32>()
            .ok()
            .filter(|i| *i <= BACNET_INSTANCE_MAX && instance.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| BacnetObjectError::Instance(instance.to_owned()))?;
        Ok(BacnetObject {
            object_type,
            instance,
        })
    }
}

impl fmt::Display for BacnetObject {
    /// `TYPE:INSTANCE`, the one spelling of this object.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.object_type.name(), self.instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_read_in_one_spelling() {
        let o = BacnetObject::parse("analog-input:3").unwrap();
        assert_eq!(o.object_type, BacnetObjectType::AnalogInput);
        assert_eq!(o.to_string(), "analog-input:3");
        assert_eq!(
            BacnetObject::parse("multi-state-value:4194303")
                .unwrap()
                .object_type
                .code(),
            19
        );
        assert_eq!(
            BacnetObject::parse("analog-input"),
            Err(BacnetObjectError::NoInstance)
        );
        assert_eq!(
            BacnetObject::parse("analog-input:+3"),
            Err(BacnetObjectError::Instance("+3".into()))
        );
        assert_eq!(
            BacnetObject::parse("analog-input:4194304"),
            Err(BacnetObjectError::Instance("4194304".into()))
        );
        assert_eq!(
            BacnetObject::parse("device:1"),
            Err(BacnetObjectError::Type("device".into()))
        );
    }
}
