from config.settings import Settings
