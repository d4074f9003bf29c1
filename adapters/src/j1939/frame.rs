//! The 29-bit J1939 identifier (J1939-21 §5.2): priority, parameter group number and
//! source address, with the destination of a PDU1 (peer-to-peer) message.

/// TP.CM, the transport protocol's connection management (J1939-21 §5.10.3).
pub const PGN_TP_CM: u32 = 60416;
/// TP.DT, the transport protocol's data transfer packets.
pub const PGN_TP_DT: u32 = 60160;
/// The global destination: every node.
pub const GLOBAL: u8 = 255;

/// What a 29-bit identifier says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Id {
    /// 0 (highest) to 7.
    pub priority: u8,
    /// The parameter group number: a PDU1 message's PGN has its PDU-specific byte 0.
    pub pgn: u32,
    /// A PDU1 message's destination address; `None` for PDU2 (broadcast: its
    /// PDU-specific byte is the group extension, part of the PGN).
    pub destination: Option<u8>,
    pub source_address: u8,
}

impl Id {
    /// Splits a 29-bit identifier (higher bits are ignored).
    pub fn from_raw(raw: u32) -> Id {
        let raw = raw & 0x1FFF_FFFF;
        let priority = (raw >> 26) as u8 & 0x7;
        // Extended data page, data page and PDU format: the PGN's top 10 bits.
        let page_and_format = (raw >> 16) & 0x3FF;
        let pdu_format = page_and_format & 0xFF;
        let pdu_specific = (raw >> 8) & 0xFF;
        let (pgn, destination) = if pdu_format < 240 {
            (page_and_format << 8, Some(pdu_specific as u8))
        } else {
            ((page_and_format << 8) | pdu_specific, None)
        };
        Id {
            priority,
            pgn,
            destination,
            source_address: raw as u8,
        }
    }

    /// The 29-bit identifier of a message (the inverse of [`Id::from_raw`]; a PDU1
    /// message without a destination goes to [`GLOBAL`]).
    pub fn to_raw(self) -> u32 {
        let pdu_format = (self.pgn >> 8) & 0xFF;
        let pgn = if pdu_format < 240 {
            (self.pgn & 0x3FF00) | u32::from(self.destination.unwrap_or(GLOBAL))
        } else {
            self.pgn & 0x3FFFF
        };
        (u32::from(self.priority & 0x7) << 26) | (pgn << 8) | u32::from(self.source_address)
    }

    /// Whether the message is addressed to every node (PDU2, or PDU1 to 255).
    pub fn is_global(&self) -> bool {
        self.destination.is_none_or(|d| d == GLOBAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pdu2_identifiers_carry_their_group_extension_in_the_pgn() {
        // EEC1 from the engine (SA 0) at priority 3: 0x0CF00400.
        let id = Id::from_raw(0x0CF0_0400);
        assert_eq!(
            id,
            Id {
                priority: 3,
                pgn: 61444,
                destination: None,
                source_address: 0
            }
        );
        // ET1 at priority 6 from SA 0x17: 0x18FEEE17.
        let id = Id::from_raw(0x18FE_EE17);
        assert_eq!((id.priority, id.pgn, id.source_address), (6, 65262, 0x17));
        assert!(id.is_global());
        assert_eq!(id.to_raw(), 0x18FE_EE17);
    }

    #[test]
    fn pdu1_identifiers_carry_a_destination() {
        // TP.CM from SA 0x00 to global: 0x1CECFF00.
        let id = Id::from_raw(0x1CEC_FF00);
        assert_eq!(id.pgn, PGN_TP_CM);
        assert_eq!(id.destination, Some(GLOBAL));
        assert!(id.is_global());
        // TP.DT from 0x25 to 0x03, priority 7.
        let id = Id::from_raw(0x1CEB_0325);
        assert_eq!(
            (id.priority, id.pgn, id.destination, id.source_address),
            (7, PGN_TP_DT, Some(3), 0x25)
        );
        assert!(!id.is_global());
        assert_eq!(id.to_raw(), 0x1CEB_0325);
        // The data page bit: PGN 0x1EF00 (PDU1 on page 1).
        let id = Id::from_raw(0x19EF_1122);
        assert_eq!((id.pgn, id.destination), (0x1EF00, Some(0x11)));
        // The extended data page bit puts the PGN at its 18-bit maximum.
        assert_eq!(Id::from_raw(0x03FF_FF00).pgn, 0x3FFFF);
    }
}
