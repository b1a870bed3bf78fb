"""What the coordinator needs from storage (`Store`) and from ownership (`Ownership`), whatever provides them."""
