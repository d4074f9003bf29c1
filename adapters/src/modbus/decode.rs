//! What a tag's registers or bits mean: pure functions from what a device answered to
//! the [`Raw`] value journaled and the [`Quality`] projected (value = raw × scale +
//! offset; anything not finite is debt).

use grid_spec::{ModbusRegister, ModbusType, WordOrder};

use crate::{Quality, Raw};

/// How one tag's value is encoded in its registers, and how it is scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Encoding {
    pub value_type: ModbusType,
    pub word_order: WordOrder,
    pub scale: f64,
    pub offset: f64,
}

/// Why a tag cannot be read at all, if so: a type its register kind cannot hold, or a
/// value running past the last address.
pub fn refusal(register: ModbusRegister, address: u16, value_type: ModbusType) -> Option<String> {
    let bits = register.holds_bits();
    if bits != (value_type == ModbusType::Bool) {
        let (what, holds) = match register {
            ModbusRegister::Holding => ("a holding register", "16-bit words"),
            ModbusRegister::Input => ("an input register", "16-bit words"),
            ModbusRegister::Coil => ("a coil", "a bit"),
            ModbusRegister::Discrete => ("a discrete input", "a bit"),
        };
        return Some(format!("{what} holds {holds}, not {}", value_type.name()));
    }
    let last = u32::from(address) + u32::from(value_type.registers()) - 1;
    if last > u32::from(u16::MAX) {
        return Some(format!(
            "a {} at address {address} runs past the last address {}",
            value_type.name(),
            u16::MAX
        ));
    }
    None
}

/// A value read from 16-bit registers, lowest address first: exactly
/// `encoding.value_type.registers()` of them.
pub fn words(encoding: &Encoding, registers: &[u16]) -> (Raw, Quality) {
    debug_assert_eq!(
        registers.len(),
        usize::from(encoding.value_type.registers())
    );
    let number = number(encoding.value_type, encoding.word_order, registers);
    (
        Raw::Registers(registers.to_vec()),
        scaled(number, encoding.scale, encoding.offset),
    )
}

/// A value read from one coil or discrete input: 0 or 1 before scale and offset.
pub fn bit(encoding: &Encoding, bit: bool) -> (Raw, Quality) {
    (
        Raw::Bool(bit),
        scaled(f64::from(u8::from(bit)), encoding.scale, encoding.offset),
    )
}

/// The number the registers encode, before scale and offset.
fn number(value_type: ModbusType, word_order: WordOrder, registers: &[u16]) -> f64 {
    let word = |i: usize| registers.get(i).copied().unwrap_or(0);
    let double = || {
        let (high, low) = match word_order {
            WordOrder::Big => (word(0), word(1)),
            WordOrder::Little => (word(1), word(0)),
        };
        (u32::from(high) << 16) | u32::from(low)
    };
    match value_type {
        ModbusType::U16 => f64::from(word(0)),
        ModbusType::I16 => f64::from(word(0) as i16),
        ModbusType::U32 => f64::from(double()),
        ModbusType::I32 => f64::from(double() as i32),
        ModbusType::F32 => f64::from(f32::from_bits(double())),
        ModbusType::Bool => f64::from(u8::from(word(0) != 0)),
    }
}

/// raw × scale + offset: good when finite, debt otherwise (a NaN or infinite f32, or a
/// product that overflowed).
fn scaled(raw: f64, scale: f64, offset: f64) -> Quality {
    let value = raw * scale + offset;
    if value.is_finite() {
        Quality::Good { value }
    } else {
        Quality::Debt {
            reason: format!("not finite: {value}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoding(value_type: ModbusType, word_order: WordOrder) -> Encoding {
        Encoding {
            value_type,
            word_order,
            scale: 1.0,
            offset: 0.0,
        }
    }

    fn value(value_type: ModbusType, word_order: WordOrder, registers: &[u16]) -> Quality {
        words(&encoding(value_type, word_order), registers).1
    }

    fn good(value: f64) -> Quality {
        Quality::Good { value }
    }

    fn debt(reason: &str) -> Quality {
        Quality::Debt {
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn sixteen_bit_values() {
        use ModbusType::*;
        assert_eq!(value(U16, WordOrder::Big, &[0xffff]), good(65535.0));
        assert_eq!(value(I16, WordOrder::Big, &[0xffff]), good(-1.0));
        assert_eq!(value(I16, WordOrder::Big, &[0x8000]), good(-32768.0));
        assert_eq!(value(U16, WordOrder::Little, &[215]), good(215.0));
    }

    #[test]
    fn thirty_two_bit_values_honour_the_word_order() {
        use ModbusType::*;
        // 0x0001_0002 = 65538: high word first in big order, low word first in little.
        assert_eq!(value(U32, WordOrder::Big, &[1, 2]), good(65538.0));
        assert_eq!(value(U32, WordOrder::Little, &[2, 1]), good(65538.0));
        assert_eq!(value(I32, WordOrder::Big, &[0xffff, 0xfffe]), good(-2.0));
        assert_eq!(value(I32, WordOrder::Little, &[0xfffe, 0xffff]), good(-2.0));
        let bits = 21.5f32.to_bits();
        let (high, low) = ((bits >> 16) as u16, bits as u16);
        assert_eq!(value(F32, WordOrder::Big, &[high, low]), good(21.5));
        assert_eq!(value(F32, WordOrder::Little, &[low, high]), good(21.5));
    }

    #[test]
    fn scale_and_offset_apply_to_the_raw_number() {
        let encoding = Encoding {
            scale: 0.5,
            offset: -10.0,
            ..encoding(ModbusType::U16, WordOrder::Big)
        };
        assert_eq!(
            words(&encoding, &[215]),
            (Raw::Registers(vec![215]), good(97.5))
        );
        assert_eq!(bit(&encoding, true), (Raw::Bool(true), good(-9.5)));
        assert_eq!(bit(&encoding, false), (Raw::Bool(false), good(-10.0)));
    }

    #[test]
    fn values_that_are_not_finite_are_debt_with_the_raw_registers() {
        use ModbusType::F32;
        let split = |f: f32| [(f.to_bits() >> 16) as u16, f.to_bits() as u16];
        assert_eq!(
            value(F32, WordOrder::Big, &split(f32::NAN)),
            debt("not finite: NaN")
        );
        assert_eq!(
            value(F32, WordOrder::Big, &split(f32::INFINITY)),
            debt("not finite: inf")
        );
        assert_eq!(
            value(F32, WordOrder::Big, &split(f32::NEG_INFINITY)),
            debt("not finite: -inf")
        );
        let overflowing = Encoding {
            scale: f64::MAX,
            ..encoding(ModbusType::U16, WordOrder::Big)
        };
        assert_eq!(
            words(&overflowing, &[2]),
            (Raw::Registers(vec![2]), debt("not finite: inf"))
        );
    }

    #[test]
    fn refusals_name_what_the_register_cannot_hold() {
        use ModbusRegister::*;
        assert_eq!(refusal(Holding, 0, ModbusType::U16), None);
        assert_eq!(refusal(Coil, 7, ModbusType::Bool), None);
        assert_eq!(refusal(Input, 65534, ModbusType::F32), None);
        assert_eq!(
            refusal(Coil, 0, ModbusType::U16).as_deref(),
            Some("a coil holds a bit, not u16")
        );
        assert_eq!(
            refusal(Holding, 0, ModbusType::Bool).as_deref(),
            Some("a holding register holds 16-bit words, not bool")
        );
        assert_eq!(
            refusal(Holding, 65535, ModbusType::U32).as_deref(),
            Some("a u32 at address 65535 runs past the last address 65535")
        );
    }
}
