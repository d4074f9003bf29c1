//! Which reads one poll cycle asks a device for: tags of one unit and register kind
//! whose addresses are contiguous or overlap share one read, up to Modbus' own limits
//! per request. Pure, so the coalescing is tested without a device.

use grid_spec::ModbusRegister;

use crate::limits::{MODBUS_READ_BITS_MAX, MODBUS_READ_REGISTERS_MAX};

/// Where one due tag's value lies: `count` registers (or bits) of `register` from
/// `address`, at `unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub unit: u8,
    pub register: ModbusRegister,
    pub address: u16,
    pub count: u16,
}

/// One read request, and which spans (indexes into the cycle's list) it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub unit: u8,
    pub register: ModbusRegister,
    pub address: u16,
    pub count: u16,
    pub members: Vec<usize>,
}

impl Read {
    /// The read of one span alone (when a coalesced read answered an exception).
    pub fn alone(span: Span, member: usize) -> Read {
        Read {
            unit: span.unit,
            register: span.register,
            address: span.address,
            count: span.count,
            members: vec![member],
        }
    }

    /// Where `span` (one of the members) starts in this read's answer.
    pub fn position(&self, span: &Span) -> usize {
        usize::from(span.address - self.address)
    }

    fn end(&self) -> u32 {
        u32::from(self.address) + u32::from(self.count)
    }
}

/// The most registers (or bits) one read of `register` may ask for.
pub fn read_max(register: ModbusRegister) -> u16 {
    if register.holds_bits() {
        MODBUS_READ_BITS_MAX
    } else {
        MODBUS_READ_REGISTERS_MAX
    }
}

/// The reads that answer every span, ordered by unit, register kind and address. Each
/// span lies wholly in exactly one read; no read spans a gap between tags or more than
/// [`read_max`].
pub fn coalesce(spans: &[Span]) -> Vec<Read> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| {
        let span = spans[i];
        (
            span.unit,
            kind_rank(span.register),
            span.address,
            span.count,
        )
    });
    let mut reads: Vec<Read> = Vec::new();
    for i in order {
        let span = spans[i];
        let start = u32::from(span.address);
        let end = start + u32::from(span.count);
        if let Some(read) = reads.last_mut() {
            let joins = read.unit == span.unit
                && read.register == span.register
                && start <= read.end()
                && end.max(read.end()) - u32::from(read.address)
                    <= u32::from(read_max(span.register));
            if joins {
                let count = end.max(read.end()) - u32::from(read.address);
                read.count = u16::try_from(count).expect("bounded by read_max");
                read.members.push(i);
                continue;
            }
        }
        reads.push(Read::alone(span, i));
    }
    reads
}

fn kind_rank(register: ModbusRegister) -> u8 {
    match register {
        ModbusRegister::Coil => 1,
        ModbusRegister::Discrete => 2,
        ModbusRegister::Holding => 3,
        ModbusRegister::Input => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ModbusRegister::*;

    fn span(unit: u8, register: ModbusRegister, address: u16, count: u16) -> Span {
        Span {
            unit,
            register,
            address,
            count,
        }
    }

    fn extents(reads: &[Read]) -> Vec<(u8, ModbusRegister, u16, u16, Vec<usize>)> {
        reads
            .iter()
            .map(|r| (r.unit, r.register, r.address, r.count, r.members.clone()))
            .collect()
    }

    #[test]
    fn contiguous_and_overlapping_tags_share_one_read() {
        let spans = [
            span(1, Holding, 102, 2),
            span(1, Holding, 100, 1),
            span(1, Holding, 101, 1),
            // overlaps the f32 at 102..104
            span(1, Holding, 103, 1),
            span(1, Holding, 104, 2),
        ];
        assert_eq!(
            extents(&coalesce(&spans)),
            vec![(1, Holding, 100, 6, vec![1, 2, 0, 3, 4])]
        );
    }

    #[test]
    fn gaps_units_and_register_kinds_split_reads() {
        let spans = [
            span(1, Holding, 100, 1),
            span(1, Holding, 102, 1),
            span(2, Holding, 101, 1),
            span(1, Input, 101, 1),
            span(1, Coil, 100, 1),
            span(1, Coil, 101, 1),
        ];
        assert_eq!(
            extents(&coalesce(&spans)),
            vec![
                (1, Coil, 100, 2, vec![4, 5]),
                (1, Holding, 100, 1, vec![0]),
                (1, Holding, 102, 1, vec![1]),
                (1, Input, 101, 1, vec![3]),
                (2, Holding, 101, 1, vec![2]),
            ]
        );
    }

    #[test]
    fn a_read_never_exceeds_the_modbus_limits() {
        let words: Vec<Span> = (0..300).map(|a| span(1, Holding, a, 1)).collect();
        let reads = coalesce(&words);
        assert_eq!(
            reads.iter().map(|r| r.count).collect::<Vec<_>>(),
            vec![125, 125, 50]
        );
        // A two-register value that would straddle the limit starts the next read.
        let mut doubles: Vec<Span> = (0..62).map(|i| span(1, Input, i * 2, 2)).collect();
        doubles.push(span(1, Input, 124, 2));
        let reads = coalesce(&doubles);
        assert_eq!(
            reads
                .iter()
                .map(|r| (r.address, r.count))
                .collect::<Vec<_>>(),
            vec![(0, 124), (124, 2)]
        );
        let bits: Vec<Span> = (0..4001).map(|a| span(1, Discrete, a, 1)).collect();
        let reads = coalesce(&bits);
        assert_eq!(
            reads.iter().map(|r| r.count).collect::<Vec<_>>(),
            vec![2000, 2000, 1]
        );
    }

    #[test]
    fn every_span_lies_in_exactly_one_read() {
        let spans: Vec<Span> = (0..500u16)
            .map(|i| span((i % 3) as u8, Holding, (i * 7) % 400, 1 + i % 2))
            .collect();
        let reads = coalesce(&spans);
        let mut seen = vec![0; spans.len()];
        for read in &reads {
            assert!(read.count <= read_max(read.register));
            for &m in &read.members {
                seen[m] += 1;
                let s = spans[m];
                assert_eq!((s.unit, s.register), (read.unit, read.register));
                assert!(s.address >= read.address);
                assert!(u32::from(s.address) + u32::from(s.count) <= read.end());
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }
}
